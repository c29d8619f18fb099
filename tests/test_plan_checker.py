"""FS2-9's checker (checks/plan_distributed.py) on hand-made rank
records, with no world started: the framework's optimizer step against the
plain one, the tolerance the plan's dtypes, the dtypes upstream and the
model's own compiled noise allow, a rank killed at the ranks' limit (a hang
in torch's step, or a world too slow: ERROR) and that limit from
--fsdpcheck-timeout, and per-rank data reaching different parameters (the
plan's mistake, or torch's FAIL). The ranks producing such records are
tests/test_plan_end_to_end.py's."""

import pytest
import torch

from pytest_fsdpcheck.checks import Violation
from pytest_fsdpcheck.checks.plan_distributed import check_plan_end_to_end

pytestmark = [pytest.mark.unit, pytest.mark.skipif(not torch.distributed.is_available(), reason="no torch.distributed")]


def test_the_checker_judges_the_optimizer_step_against_the_plain_one():
    """Parameters after the framework's optimizer step on the sharded model
    equal the plain optimizer's on the same gradients within a few ulps of
    the parameter's largest entry; beyond that one FS2-9 line per rank and
    mode naming the worst parameter."""
    grads = {"w": torch.ones(3)}
    expected = {"w": torch.tensor([1.0, 2.0, 4.0])}
    record = {"rank": 0, "world_size": 2, "reference": grads, "precision": {}}

    def step(after):
        return {"error": None, "grads": grads, "optimizer": {"after": {"w": after}, "expected": expected}}

    ulp = torch.finfo(torch.float32).eps * 4.0
    close = torch.tensor([1.0, 2.0, 4.0 + 2 * ulp])
    assert check_plan_end_to_end([{**record, "eager": step(close), "compiled": step(close)}]) == []
    off = torch.tensor([1.0, 2.0, 4.01])
    violations = check_plan_end_to_end([{**record, "eager": step(off), "compiled": step(close)}])
    assert [v.invariant for v in violations] == ["FS2-9"]
    assert str(violations[0]).startswith("FS2-9: rank 0, eager: after the framework's optimizer step on the sharded "
                                         "parameters, w differs from the plain optimizer's"), str(violations[0])


# --- tolerance: the plan's dtypes (issue 28), the model's own compiled layers -------


def _low_records(have, want, precision, mode_grads=None):
    return [{"rank": 0, "error": None, "world_size": 2, "reference": {"w": want}, "precision": {"w": precision},
             "eager": {"error": None, "grads": {"w": have}},
             "compiled": {"error": None, "grads": {"w": mode_grads if mode_grads is not None else have}}}]


def test_checker_tolerance_follows_the_plans_dtypes():
    want = torch.tensor([1.0, 0.5, -0.25])
    bf16_ulp = want.clone()
    bf16_ulp[0] += 2 ** -8  # one bf16 rounding of the largest entry
    plan = ("bfloat16", "float32")
    # eager: fp32 reduction's slack only, the bf16 rounding shows
    eager_only = check_plan_end_to_end(_low_records(bf16_ulp, want, plan, mode_grads=want))
    assert [v.message.split(":")[0] for v in eager_only] == ["rank 0, eager"]
    assert "(bfloat16 compute, float32 reduction; allowed: 2 x eps(float32)" in eager_only[0].message
    # compiled: fused bf16 kernels may round once where eager rounds twice
    assert check_plan_end_to_end(_low_records(want, want, plan, mode_grads=bf16_ulp)) == []
    # a reduction in bf16 asked for: bf16's slack in both modes
    assert check_plan_end_to_end(_low_records(bf16_ulp, want, ("bfloat16", "bfloat16"))) == []
    # doubled is doubled at any precision
    doubled = check_plan_end_to_end(_low_records(2 * want, want, ("bfloat16", "bfloat16")))
    assert len(doubled) == 2 and "4 x eps(bfloat16) for fused kernels" in doubled[1].message
    # a gradient in another dtype than the parameter's
    assert "has dtype bfloat16" in check_plan_end_to_end(_low_records(want.bfloat16(), want, plan))[0].message


def test_a_step_through_the_models_own_compiled_layers_takes_a_compilers_tolerance():
    """Issue 56 finding 1: layers the model compiles itself (``layer.compile()``
    before ``fully_shard``) run Inductor's kernels in the eager step too, and
    were judged at eager's tolerance (2 x eps(float32)): a bf16 rounding was
    a FAIL in torch's column. Such a step takes the compiled allowance; a
    wrong gradient still fails, its first line saying how many differ, the
    worst relative difference and what the step compiled."""
    want = torch.tensor([1.0, 0.5, -0.25])
    bf16_ulp = want.clone()
    bf16_ulp[0] += 2 ** -8
    plan = ("bfloat16", "float32")
    own = _low_records(bf16_ulp, want, plan, mode_grads=want)
    own[0]["eager"]["own_compiled"] = ["layers.0", "layers.1"]
    assert check_plan_end_to_end(own) == []
    plain = check_plan_end_to_end(_low_records(bf16_ulp, want, plan, mode_grads=want))
    assert plain and plain[0].message.endswith("; the step compiled nothing (eager)"), plain
    two = [{**own[0], "reference": {"w": want, "v": want}, "precision": {"w": plan, "v": plan},
            "eager": {"error": None, "own_compiled": ["layers.0"], "grads": {"w": 3 * want, "v": want + 0.5}},
            "compiled": {"error": None, "graphs": 2, "grads": {"w": want, "v": want}}}]
    [wrong] = check_plan_end_to_end(two)
    first = wrong.message.splitlines()[0]
    assert first.startswith("rank 0, eager: 2 of 2 gradients are wrong; worst: the gradient of w differs"), first
    assert ", 2 of its largest entry; the step compiled 1 of the model's own compiled modules (layers.0)" in first
    assert "the gradient of v differs" in wrong.detail and "the gradient of w differs" in wrong.detail
    # per-block torch.compile (the blocks compile themselves): the outer compile owes no graph
    blocks = [{**own[0], "compiled": {"error": None, "graphs": 0, "unsharded_graphs": 1,
                                      "own_compiled": ["layers.0"], "grads": {"w": want}}}]
    assert check_plan_end_to_end(blocks) == []
    del blocks[0]["compiled"]["own_compiled"]
    [eagerly] = check_plan_end_to_end(blocks)
    assert "gave its backend no graph of the sharded model" in eagerly.message


# --- tolerance: the dtypes upstream and the model's own noise (issue 38) ------------


def _routed_records(have, want, upstream="bfloat16", noise=None, mode="compiled"):
    other = "eager" if mode == "compiled" else "compiled"
    return [{"rank": 0, "error": None, "world_size": 2, "reference": {"router": want}, "precision": {},
             "upstream": {"router": upstream}, "noise": {} if noise is None else {"router": noise},
             mode: {"error": None, "grads": {"router": have}}, other: {"error": None, "grads": {"router": want}}}]


def test_checker_tolerance_follows_the_dtypes_upstream_and_the_models_own_noise():
    """Item 3: an fp32 parameter whose gradient is computed through bf16
    (an MoE router after bf16 blocks) differs compiled from eager by about
    a percent with no FSDP at all. It failed against the fp32 tolerance,
    with no tolerance stated; now the compiled tolerance is the upstream
    dtype's fused-kernel allowance plus twice the unsharded model's own
    compiled-vs-eager difference measured in the control, and stated."""
    want = torch.linspace(-1.0, 1.0, 16)
    off = want * 1.013  # 1.3 % off everywhere, as the router
    noise = (off - want).abs().max().item()
    # the unsharded model's own compiled noise is allowed ...
    assert check_plan_end_to_end(_routed_records(off, want, noise=noise)) == []
    # ... and 4 bf16 ulps of the largest entry cover it from the dtypes alone
    assert check_plan_end_to_end(_routed_records(off, want)) == []
    # never eagerly: the control repeats the eager step op for op
    [eager] = check_plan_end_to_end(_routed_records(off, want, mode="eager"))
    assert eager.message.startswith("rank 0, eager: the gradient of router differs") and "tolerance" in eager.message
    # an fp32 step compiled gets the fp32 tolerance only, stated
    [fp32] = check_plan_end_to_end(_routed_records(off, want, upstream="float32"))
    assert "(max abs difference 0.013, largest entry 1, tolerance 1e-05 + rtol 0.0001 x each entry)" in fp32.message
    # doubled is beyond any noise, and the message states both numbers
    [doubled] = check_plan_end_to_end(_routed_records(2 * want, want, noise=noise))
    assert ("(computed through bfloat16; allowed: 4 x eps(bfloat16) for fused kernels + 2 x 0.013, the unsharded "
            "model's own compiled-vs-eager difference) (max abs difference 1, largest entry 1, tolerance 0.0573")\
        in doubled.message, doubled.message


# --- time limits: a hang or a world too slow (issue 38) -----------------------------


def _killed(phase, spent, **facts):
    return {"rank": 0, "error": "timed out after 60s and was killed", "timed_out": True, "limit_s": 60.0,
            "killed_at": 1000.0, "progress": {"phase": phase, "phase_at": 1000.0 - spent, **facts}}


def test_a_rank_killed_in_the_plans_step_is_a_hang_and_a_slow_world_is_an_error():
    """Item 5: a rank killed at the limit in the plan's own step, where the
    unsharded control's same step took a small part of that, is a hang in
    torch's runtime (FAIL, named); killed while starting, in the control,
    or in a step no slower than its control allows, the world is too slow
    (ERROR, never FAIL). Every time-out was 'rank 0 failed: timed out', a FAIL."""
    from pytest_fsdpcheck.checks.plan_distributed import world_too_slow

    hung = [_killed("eager", 40.0, control_s=0.05)]
    [v] = check_plan_end_to_end(hung)
    assert v.message.startswith("rank 0, eager: the plan's step did not finish: killed after 40 s in it at the ranks' "
                                "limit of 60 s, where the unsharded model's step took 0.05 s"), v.message
    assert world_too_slow(hung) is None
    compiled = [_killed("compiled", 40.0, control_s=0.05, compiled_control_s=1.0)]
    assert "compiled: the plan's step did not finish" in check_plan_end_to_end(compiled)[0].message
    # no compiled step of the control measured (an fp32 plan): hung past one call's limit
    fp32_compiled = [_killed("compiled", 40.0, control_s=0.05) | {"call_limit_s": 30.0}]
    assert "longer than one call may take (--fsdpcheck-timeout 30 s): hung" in check_plan_end_to_end(fp32_compiled)[0].message
    assert world_too_slow(fp32_compiled) is None
    for slow in ([_killed("control", 30.0)], [_killed("world", 60.0)], [_killed("eager", 40.0, control_s=3.0)],
                 # no compiled step of the control to compare with, within one call's limit
                 [_killed("compiled", 40.0, control_s=0.05) | {"call_limit_s": 60.0}],
                 [{"rank": 1, "error": "timed out after 60s and was killed", "timed_out": True, "limit_s": 60.0,
                   "killed_at": 1000.0}]):
        why = world_too_slow(slow)
        assert why is not None and "the world is too slow to judge the plan; raise --fsdpcheck-timeout" in why, slow
    assert world_too_slow([{"rank": 0, "error": "died without a result", "timed_out": False}]) is None


def test_the_ranks_limit_follows_the_timeout_option_and_the_steps_cost(monkeypatch):
    """Item 5: the ranks' limit comes from --fsdpcheck-timeout, scaled by
    the unsharded step's measured cost (it was 180 s whatever the option);
    a world killed there outside a hung step raises EnvironmentFault."""
    from pytest_fsdpcheck.cases import checks
    from pytest_fsdpcheck.cases.exposure import case_of
    from pytest_fsdpcheck.cases.probe import _torch_impl
    from pytest_fsdpcheck.checks import EnvironmentFault
    from pytest_fsdpcheck.runs.plan_world import PLAN_CALLS, STEP_COST_FACTOR, rank_limit

    assert rank_limit(0, 5.0) is None  # 0: no limit, as the option says
    assert rank_limit(10.0, 0.5) == PLAN_CALLS * 10.0 + STEP_COST_FACTOR * 0.5
    limits = []

    def killed_world(build, world_size, timeout=None, groups=None, call_limit=None):
        limits.append(timeout)
        return [_killed("control", timeout) | {"limit_s": timeout}, _killed("control", timeout) | {"rank": 1}]

    monkeypatch.setattr("pytest_fsdpcheck.runs.plan_world.run_plan_ranks", killed_world)
    monkeypatch.setattr(checks, "_unsharded_step_seconds", lambda case: 0.2)
    with pytest.raises(EnvironmentFault, match=r"^environment \(gloo on cpu, world size 2\): rank 0 was killed at "
                                               r"the ranks' limit of 40 s in phase 'control'"):
        checks.check_plan_end_to_end(case_of("tests.planted.plans:good"), _torch_impl(), world_size=2,
                                     timeout_s=10.0)
    assert limits == [PLAN_CALLS * 10.0 + STEP_COST_FACTOR * 0.2]


# --- issue 57, family 4: each rank its own data, reaching different parameters ------


def _per_rank_records(error=None, unused_reduced=True, roots=("",), have=None, modules=None, **record):
    """Two ranks' records of a routed plan: ``e.w`` reached on rank 0 only, ``z.w`` by none."""
    one = torch.ones(2)
    have = {"e.w": one, "z.w": torch.zeros(2)} if have is None else have
    step = {"error": error, "grads": have,
            "plan_groups": [{"roots": list(roots), "params": ["e.w", "z.w"], "unused_reduced": unused_reduced}]}
    reach = {"params": {"e.w": [0]}, "modules": modules or {}}
    return [{"rank": r, "error": None, "reference": {"e.w": one, "z.w": None}, "world_size": 2, "reach": reach,
             "eager": dict(step), "compiled": dict(step), **record} for r in (0, 1)]


def test_a_plan_that_breaks_fsdp2s_per_rank_step_is_the_users_mistake_naming_what():
    """The plan leaves set_reduce_scatter_unused_params off for a parameter
    only some ranks reach, or makes a group of a module some rank never
    calls (its all-gather is every rank's collective): where the step then
    fails, hangs or mixes gradients, a case error naming the parameter or
    module; where the step passes, nothing."""
    from pytest_fsdpcheck.checks.plan_distributed import reach_mistake

    mixed = _per_rank_records(unused_reduced=False, have={"e.w": torch.full((2,), 3.0), "z.w": None})
    why = reach_mistake(mixed, check_plan_end_to_end(mixed))
    assert why is not None and "reach e.w only on rank 0" in why and "set_reduce_scatter_unused_params off" in why
    crashed = _per_rank_records(error="RuntimeError: Connection closed by peer", unused_reduced=False)
    assert "set_reduce_scatter_unused_params off" in reach_mistake(crashed, check_plan_end_to_end(crashed))
    skipped = _per_rank_records(error="RuntimeError: Timed out waiting 60000ms for recv", roots=("e",),
                              modules={"e": [0]})
    why = reach_mistake(skipped, check_plan_end_to_end(skipped))
    assert why is not None and "call e's forward only on rank 0" in why and "all-gathers" in why
    passed = _per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": None})
    assert check_plan_end_to_end(passed) == [] and reach_mistake(passed, []) is None
    # failing elsewhere (starting): not the step's, so not the plan's per-rank mistake
    elsewhere = _per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": None})
    elsewhere[1] = {"rank": 1, "error": "RuntimeError: the world did not start"}
    assert reach_mistake(elsewhere, check_plan_end_to_end(elsewhere)) is None


def test_with_the_plan_keeping_fsdp2s_per_rank_step_a_failure_is_torchs_naming_the_parameter():
    """The plan reduces unused parameters and every rank calls every group's
    module: a failure, a hang or a wrong gradient is the implementation's
    FS2-9 FAIL, its line naming what only some ranks reach; a parameter no
    rank reached may hold FSDP2's documented zero, and nothing else."""
    from pytest_fsdpcheck.checks.plan_distributed import reach_mistake, world_too_slow

    assert check_plan_end_to_end(_per_rank_records()) == []
    crashed = _per_rank_records(error="RuntimeError: Connection closed by peer")
    violations = check_plan_end_to_end(crashed)
    assert reach_mistake(crashed, violations) is None
    assert violations and all("e.w only on rank 0" in v.message and "as FSDP2 documents" in v.message
                              for v in violations), violations
    ones = _per_rank_records(have={"e.w": torch.ones(2), "z.w": torch.ones(2)})
    [eager, compiled] = check_plan_end_to_end(ones)
    assert "z.w exists, the unsharded model has none" in eager.message
    assert check_plan_end_to_end(_per_rank_records(unused_reduced=False, have={"e.w": torch.ones(2), "z.w": torch.zeros(2)}))
    # a rank killed in its step, no slower than its control, with the ranks' reach uneven: a hang, never ERROR
    killed = [_killed("eager", 10.0, control_s=3.0) | {"reach": {"params": {"e.w": [1]}, "modules": {}}}]
    [hang] = check_plan_end_to_end(killed)
    assert "waiting on a collective the other ranks never reached (hung)" in hang.message and "e.w" in hang.message
    assert world_too_slow(killed) is None


def test_fs2_unused_params_graphs_differ_reads_only_a_plan_keeping_fsdp2s_per_rank_step():
    """pytorch#158719's signature: on every rank, the step hung, timed out,
    died or left wrong gradients, where the ranks' batches reach different
    parameters through modules every rank calls and the plan keeps what
    FSDP2 documents. A module some rank does not call (the routed experts'
    shape, which torch handles), another error, one rank only, or another
    invariant is not this bug."""
    from pytest_fsdpcheck.impls.torch_bug_signatures import unused_params_graphs_differ as explains

    keeps = ("(the ranks' batches reach different parameters aux.weight only on rank 0, aux.bias only on rank 0; "
             "the plan calls every group's module on every rank and reduces unused parameters, as FSDP2 documents "
             "such a step)")
    timed_out = "the plan's step failed: RuntimeError: [gloo/unbound_buffer.cc:78] Timed out waiting 15000ms for " \
                "recv operation to complete"
    run = [Violation("FS2-9", f"rank {r}, eager: {timed_out} {keeps}") for r in (0, 1)]
    assert explains(run)
    wrong = [Violation("FS2-9", f"ranks 0, 1, {m}: 4 of 24 gradients are wrong; worst: the gradient of aux.weight "
                                f"is None, the unsharded model's is not {keeps}") for m in ("eager", "compiled")]
    assert explains(wrong)
    assert explains([Violation("FS2-9", f"rank 0 failed: died without a result {keeps}"), run[1]])
    assert not explains(run[:1])  # one rank only
    routed = keeps.replace("; the plan calls", "; modules' forwards experts.0 only on rank 0; the plan calls")
    assert not explains([Violation("FS2-9", f"rank {r}, eager: {timed_out} {routed}") for r in (0, 1)])
    other = [Violation("FS2-9", f"rank {r}, eager: the plan's step failed: KeyError: 'x' {keeps}") for r in (0, 1)]
    assert not explains(other)
    assert not explains([Violation("FS2-11", v.message) for v in run])
    plain = [Violation("FS2-9", f"rank {r}, eager: {timed_out}") for r in (0, 1)]  # ranks reaching alike
    assert not explains(plain)
