"""The traceable-model generator's real-forward features (buffers, views and
slices, tied parameters, batch norms, ModuleLists) are drawn and shrink to
a minimal model that still has the feature."""

import pytest
from hypothesis import HealthCheck, find, settings

from pytest_fsdpcheck.generators.models import build_model, model_specs
from pytest_fsdpcheck.strategies import model_specs as public_model_specs

pytestmark = pytest.mark.unit

SETTINGS = settings(max_examples=2000, database=None, derandomize=True, suppress_health_check=list(HealthCheck), deadline=None)


def _steps(spec):
    return [step[0] for program in spec.programs for step in program]


FEATURES = {
    "buffer-next-to-param": (lambda s: "buf_param" in _steps(s), 1),
    "transposed-view": (lambda s: "t_linear" in _steps(s), 1),
    "slice": (lambda s: "slice" in _steps(s), 1),
    "child-buffer": (lambda s: "child_buf" in _steps(s), 2),
    "tied": (lambda s: bool(s.ties), 2),
    "module-list": (lambda s: "list" in s.kinds, 2),
    "batch-norm": (lambda s: "norm" in s.kinds, 2),
}
@pytest.fixture(scope="session")
def shrunk(session_folder):
    """``shrunk(feature)``: the minimal spec with the feature, as the
    derandomized search finds it. The two tests of a feature ask for the
    same search (seconds each): the first asker's result is kept for the
    session, in a folder its xdist workers share."""
    import os
    import pickle

    folder = session_folder / "shrunk-model-specs"
    folder.mkdir(exist_ok=True)

    def get(feature):
        kept = folder / f"{feature}.pickle"
        if kept.exists():
            return pickle.loads(kept.read_bytes())
        spec = find(model_specs(), FEATURES[feature][0], settings=SETTINGS)
        partial = folder / f".{feature}.{os.getpid()}"
        partial.write_bytes(pickle.dumps(spec))
        os.replace(partial, kept)  # whole or not at all, for the other worker
        return spec

    return get


# Module programs are drawn after all modules, the root's last: deleting a
# module shifts every program drawn after it, and for these features the
# shrinker stops at a few spare modules. Measured with the derandomized
# search below; strict, so a better draw order shows up as an XPASS.
SPARE_MODULES = {"buffer-next-to-param", "transposed-view", "slice", "child-buffer", "tied"}


@pytest.mark.parametrize(
    "feature",
    [
        pytest.param(f, marks=pytest.mark.xfail(strict=True, reason="a spare child call survives shrinking"))
        if f == "transposed-view"
        else f
        for f in FEATURES
    ],
)
def test_feature_shrinks_to_its_one_step(feature, shrunk):
    spec = shrunk(feature)
    assert len(_steps(spec)) <= 1, spec.to_source()
    build_model(spec)  # the minimal example builds


@pytest.mark.parametrize(
    "feature",
    [
        pytest.param(f, marks=pytest.mark.xfail(strict=True, reason="spare modules survive shrinking (draw order)"))
        if f in SPARE_MODULES
        else f
        for f in FEATURES
    ],
)
def test_feature_shrinks_to_the_fewest_modules(feature, shrunk):
    _, size = FEATURES[feature]
    spec = shrunk(feature)
    assert spec.size == size, spec.to_source()


def test_buffers_are_persistent_or_not_and_ties_share_one_parameter():
    spec = find(
        model_specs(),
        lambda s: s.ties and any("pbuf" in b for b in s.buffers) and any("nbuf" in b for b in s.buffers),
        settings=SETTINGS,
    )
    built = build_model(spec)
    state = built.root.state_dict()
    named = dict(built.root.named_buffers())
    assert any(name not in state for name in named) and any(name in state for name in named)
    module, param, source, source_name = spec.ties[0]
    tied = built.modules[module]._param_names[param]
    assert getattr(built.modules[module], tied) is getattr(built.modules[source], source_name)


def test_strategies_expose_the_generator():
    assert public_model_specs is model_specs
