"""Public hypothesis strategies for users' own properties.

>>> from pytest_fsdpcheck.strategies import module_trees
>>> from hypothesis import given
>>> @given(module_trees(max_modules=10))
... def test_mine(spec): ...
"""

from .generators.fsdp2 import (  # noqa: F401
    BuiltFsdp2,
    BuiltFsdp2Plan,
    Fsdp2Plan,
    Fsdp2Spec,
    PlanCall,
    build_fsdp2,
    build_fsdp2_plan,
    fsdp2_deep_chain,
    fsdp2_diamond_chain,
    fsdp2_plans,
    fsdp2_shared_ignored,
    fsdp2_specs,
    fsdp2_wide_tree,
    fully_shard_specs,
)
from .generators.graphs import (  # noqa: F401
    BuiltGraph,
    GraphSpec,
    ModuleSpec,
    OpSpec,
    ParamSpec,
    build_graph,
    graph_specs,
    graphs,
    large_spec,
)
from .generators.models import (  # noqa: F401
    ModelSpec,
    build_model,
    chain_model,
    exotic_tracer_specs,
    make_tracer,
    model_specs,
)
from .generators.trees import (  # noqa: F401
    TreeSpec,
    build_tree,
    deep_chain,
    deep_trees,
    diamond_chain,
    diamond_chains,
    module_trees,
    wide_tree,
    wide_trees,
)
