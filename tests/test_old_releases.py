"""What the suite does on torch releases older than the one installed here
(issue 37 item 5): the APIs it meets there, as read in those releases'
source, stood in for where the behaviour is the suite's own."""

import pickle

import pytest

from pytest_fsdpcheck.plugin import isolation

pytestmark = pytest.mark.unit


class _Torch20Config:
    """torch 2.0.1's ``torch._dynamo.config_utils.ConfigModule``, as far as
    the suite uses it: entries in ``_config``, set by attribute, and a
    ``load_config`` that only unpickles what ``save_config`` gave (2.1.2's
    is the same; a dict there raises ``TypeError: a bytes-like object is
    required, not 'dict'``); no ``get_config_copy``."""

    def __init__(self, **entries):
        object.__setattr__(self, "_config", dict(entries))

    def __setattr__(self, name, value):
        if name not in self._config:
            raise AttributeError(f"torch._dynamo.config.{name} does not exist")
        self._config[name] = value

    def __getattr__(self, name):
        try:
            return self._config[name]
        except KeyError:
            raise AttributeError(name) from None

    def save_config(self):
        return pickle.dumps(dict(self._config), protocol=2)

    def load_config(self, data):
        self._config.update(pickle.loads(data))


def test_dynamo_config_is_restored_on_a_release_whose_load_config_takes_bytes():
    config = _Torch20Config(cache_size_limit=8, verbose=False, backend_fn=len)
    saved = isolation._config_copy(config)
    assert saved == {"cache_size_limit": 8, "verbose": False, "backend_fn": len}
    config.cache_size_limit = 64
    config.verbose = True
    isolation._load_config(config, {**saved, "a_later_release_only_key": 1})
    assert config._config == {"cache_size_limit": 8, "verbose": False, "backend_fn": len}


def test_torch_2_0_alone_gives_its_bucket_count_only_in_the_table():
    """Read in each release's DDPOptimizer: 2.0.1 logs "used bucket cap N and
    produced the following buckets:" and the buckets only in tabulate's
    table; 2.1.2 on log "created K buckets" (provided.py)."""
    from pytest_fsdpcheck.impls.torch_splitting import _count_logged

    assert [_count_logged((2, minor)) for minor in range(0, 16)] == [False] + [True] * 15


def _lazy_init_2_0():
    # what torch 2.0.1's (and 2.1.2's) CUDA build runs in torch.cuda._lazy_init
    # before it looks for a GPU (and fails without one)
    import os

    if "CUDA_MODULE_LOADING" not in os.environ:
        os.environ["CUDA_MODULE_LOADING"] = "LAZY"
    raise RuntimeError("Found no NVIDIA driver on your system.")


def test_cuda_module_loading_set_by_torchs_own_cuda_init_is_not_a_leak_but_another_value_is(monkeypatch):
    """On a CUDA build without a GPU, torch 2.0's FSDP state constructor
    tries CUDA, whose initialisation sets CUDA_MODULE_LOADING=LAZY at every
    try: torch's bookkeeping. Another value, or the variable where the
    installed torch's CUDA initialisation has no such line, is a leak."""
    import os

    import torch.cuda

    name = "CUDA_MODULE_LOADING"
    monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "_lazy_init", _lazy_init_2_0)
    before = isolation._process_state()
    try:
        torch.cuda._lazy_init()
    except RuntimeError:
        pass
    assert os.environ[name] == "LAZY"
    assert isolation.leaks(before, isolation._process_state()) == []
    os.environ[name] = "EAGER"
    assert isolation.leaks(before, isolation._process_state()) == [f"environ ({name})"]
    os.environ[name] = "LAZY"
    monkeypatch.setattr(torch.cuda, "_lazy_init", lambda: None)  # a CUDA initialisation that never sets it
    assert isolation.leaks(before, isolation._process_state()) == [f"environ ({name})"]
    isolation._restore_process(before, isolation.FirstImports())
    assert name not in os.environ


@pytest.mark.parametrize("check", ["check_fsdp2_walk", "check_fsdp2_recorded", "check_fully_shard_calls"])
def test_a_plan_with_a_grouped_call_is_np_where_fully_shard_takes_one_module(check, monkeypatch):
    """torch 2.3 and 2.4's fully_shard takes one module: a framework's plan
    with ``fully_shard([embed, lm_head])`` (its plan for a newer release) is
    n/p there, naming why, never torch's FS2-7 FAIL (measured on 2.4.1:
    torch raised AttributeError on the list, charged to torch before). The
    gate is the adapter's ``several_roots``, from the version alone."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.core.not_provided import NotProvided
    from pytest_fsdpcheck.impls.torch_impl import TorchImplementation
    from tests.planted import plans

    impl = TorchImplementation()
    monkeypatch.setattr(impl.fsdp2, "several_roots", False)  # as on 2.3 and 2.4
    with pytest.raises(NotProvided, match="several modules in one call; this implementation's fully_shard takes one"):
        getattr(checks, check)(plans.good(), impl)
