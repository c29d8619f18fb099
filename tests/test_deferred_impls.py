"""The xdist controller's stand-ins for implementations (session.py): what
they answer before and after a worker told what it loaded, and that where
no worker told (each crashed) the implementation is loaded after all."""

import pytest

from pytest_fsdpcheck.contract import provided_areas
from pytest_fsdpcheck.core.bugs import active_bugs, known_bugs_of
from pytest_fsdpcheck.impls import ImplementationError
from pytest_fsdpcheck.plugin.options import Settings
from pytest_fsdpcheck.plugin.session import DeferredImplementation, Session, _load

pytestmark = pytest.mark.unit


def _controller(*specs):
    return Session(impls={s: DeferredImplementation(s, 30.0) for s in specs}, devices=[], seed=None,
                   settings=Settings(), torch_version="0.0.0", deferred=True)


def test_a_missing_module_is_refused_without_importing_it():
    with pytest.raises(ImplementationError, match="cannot import 'tests.planted.no_such_module'"):
        DeferredImplementation("tests.planted.no_such_module:Impl", 30.0)
    with pytest.raises(ImplementationError, match="unknown implementation 'nonesuch'"):
        DeferredImplementation("nonesuch", 30.0)


def test_what_a_worker_loaded_is_what_the_controller_reports():
    import torch

    worker = Session(impls={s: _load(s, 30.0) for s in ("torch", "reference")}, devices=["cpu"], seed=None,
                     settings=Settings(), torch_version=torch.__version__)
    controller = _controller("torch", "reference")
    assert controller.awaiting_workers()
    controller.learn(worker.loaded())
    assert not controller.awaiting_workers()
    assert controller.torch_version == str(torch.__version__) and controller.devices == ["cpu"]
    for spec in ("torch", "reference"):
        stand_in, loaded = controller.impls[spec], worker.impls[spec]
        assert provided_areas(stand_in) == provided_areas(loaded)
        assert known_bugs_of(stand_in) == known_bugs_of(loaded)
        assert active_bugs(stand_in, controller.torch_version) == active_bugs(loaded, worker.torch_version)
        assert stand_in._impl is None  # answered from the worker's account, nothing loaded here
    assert active_bugs(controller.impls["torch"], controller.torch_version)  # not vacuous on 2.13


def test_untold_or_uncatalogued_loads_the_implementation():
    controller = _controller("reference", "tests.planted.traversal:LastOwner")
    assert provided_areas(controller.impls["reference"]) == provided_areas(_load("reference", 30.0))
    assert controller.impls["reference"]._impl is not None
    told = controller.impls["tests.planted.traversal:LastOwner"]
    told.learn({"areas": ["traversal"], "bugs": None})  # a bug of its own: not sent, asked of the object
    assert provided_areas(told) == ["traversal"] and told._impl is None
    assert known_bugs_of(told) == () and told._impl is not None


def test_an_implementation_no_worker_could_load_has_no_areas():
    stand_in = DeferredImplementation("tests.planted.traversal:NoSuchImplementation", 30.0)
    assert provided_areas(stand_in) == [] and known_bugs_of(stand_in) == ()
