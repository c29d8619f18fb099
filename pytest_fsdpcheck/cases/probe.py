"""Whose fault, before any check runs: the user's mistakes in a model case
(:func:`case_problem`: a model or inputs on the meta device, inputs or a
loss the forward rejects, the framework's step failing on the unsharded
model, an output with no floating-point tensor, a plan that raises, makes
no ``fully_shard`` call or breaks a PLN rule), probed once per
configuration and named in one line (:func:`case_label`). :func:`_resolve`
gives each check of :mod:`.checks` its case and implementation and raises
that line as a :class:`~pytest_fsdpcheck.cases.model.CaseError`, so no
check charges the user's mistake to an implementation.
"""

from __future__ import annotations

from ..checks import Violation
from .inputs import recorded
from .model import CaseError, ModelCase, _one_line
from .replay import calls_on, replicate_on


def case_problem(case: ModelCase) -> str | None:
    """The user's mistake in ``case``, one line naming its factory, or None
    (probed once per configuration, before any implementation runs): a model
    or inputs on the meta device, inputs the model's forward rejects, an
    output holding no floating-point tensor, a plan that raises or makes no
    ``fully_shard`` call. Every check needs what these break, so a check on
    such a case would charge the user's mistake to the implementation."""
    # each check builds its own case from the factory: probe a configuration once
    from ..core.run_state import current

    # the run's: the same factory name may be other code in another session
    probed = current().probed_cases
    key = (case.factory_ref, repr(case.factory_kwargs)) if case.factory_ref else id(case)
    hit = probed.get(key)
    if hit is None or (not case.factory_ref and hit[0] is not case):
        cause = _meta_problem(case) or _forward_problem(case) or _plan_problem(case)
        # a factory's configurations are many under fuzz: keep their messages, not their models
        hit = probed[key] = (None if case.factory_ref else case, None if cause is None else f"{case_label(case)}: {cause}")
    return hit[1]


def case_label(case: ModelCase) -> str:
    """``model pkg.module:factory(k=v)``, as the user names it; ``case 'name'`` without a factory."""
    if case.factory_ref:
        kwargs = ", ".join(f"{k}={v!r}" for k, v in case.factory_kwargs)
        return f"model {case.factory_ref}" + (f"({kwargs})" if kwargs else "")
    return f"case {case.name!r}"


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = _one_line(exc)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _meta_problem(case) -> str | None:
    import torch

    for name, tensor in [*case.model.named_parameters(), *case.model.named_buffers()]:
        if tensor.is_meta:
            return f"model is on the meta device ({name} has no data); build it on a real device"
    for i, x in [*enumerate(case.example_inputs), *case.example_kwargs.items()]:
        if isinstance(x, torch.Tensor) and x.is_meta:
            return f"example input {i} is on the meta device"
    return None


def _forward_problem(case) -> str | None:
    import torch

    from .recording import _pristine

    model = _pristine(case)
    try:
        with torch.no_grad():
            out = case.call(model)
    except Exception as exc:  # noqa: BLE001 - the user's model and inputs, in one line
        return f"example inputs do not fit: {_first_line(exc)}"
    problem = _output_problem(out)
    if problem is None and case.loss is not None:
        from ..runs.plan_run import step_loss

        try:
            with torch.no_grad():
                step_loss(out, (case.example_inputs, case.example_kwargs), case.loss)
        except Exception as exc:  # noqa: BLE001 - the user's loss, in one line
            return f"the case's loss on the model's output: {_first_line(exc)}"
    return problem or _training_step_problem(case)


def _training_step_problem(case) -> str | None:
    """Why the framework's own step (its micro-batches and optimizer, as
    FS2-9 takes it) cannot run on the unsharded model, where no
    implementation's code runs: the user's, in one line, or None."""
    import torch

    from ..runs.plan_run import TrainingStep, micro_batches
    from .recording import _pristine

    step = TrainingStep.of(case)
    inputs = (case.example_inputs, case.example_kwargs)
    try:
        micro_batches(inputs, step.micro_batches)
    except ValueError as exc:
        return str(exc)
    if step.optimizer is None:
        return None
    model = _pristine(case)
    try:
        with torch.enable_grad():
            step.backward(model, inputs)
    except Exception:  # noqa: BLE001 - the forward and loss are judged by the checks that step
        return None
    try:
        optimizer = step.optimizer(model)
        if not isinstance(optimizer, torch.optim.Optimizer):
            return f"the case's optimizer(model) returned a {type(optimizer).__name__}, not a torch.optim.Optimizer"
        optimizer.step()
    except Exception as exc:  # noqa: BLE001 - the user's optimizer, in one line
        return f"the case's optimizer on the unsharded model: {_first_line(exc)}"
    return None


def _output_problem(out) -> str | None:
    """Why ``out`` cannot give a loss (every check that steps or compares
    gradients takes one from its floating-point tensors), or None."""
    import torch

    from ..runs.plan_run import output_tensors

    tensors = output_tensors(out)
    if any(t.is_floating_point() for t in tensors):
        return None
    if isinstance(out, torch.Tensor):
        return f"forward returned a {out.dtype} tensor, expected floating-point tensors"
    if tensors:
        return f"forward returned a {type(out).__name__} of {tensors[0].dtype} tensors, expected floating-point tensors"
    return f"forward returned {type(out).__name__}, expected tensors"


def _plan_problem(case) -> str | None:
    problem = _plan_unusable(case)
    if problem is not None or case.plan is None or not _fsdp2_runs():
        return problem
    broken = plan_rule_violations(recorded(case))
    if broken:
        others = sorted({v.invariant for v in broken[1:]} - {broken[0].invariant})
        return f"{broken[0].invariant}: {broken[0].message}" + (f" (also breaks {', '.join(others)})" if others else "")
    return None


def _fsdp2_runs() -> bool:
    import torch

    from ..impls.torch_fsdp2 import fsdp2_available

    return torch.distributed.is_available() and fsdp2_available()


def _plan_unusable(case) -> str | None:
    """Why the plan cannot be recorded at all (it raises, makes no call, a
    call the installed fully_shard does not take or rejects), or None."""
    if case.plan is None or not _fsdp2_runs():
        return None  # the FSDP2 checks are n/p: nothing runs the plan
    record = recorded(case)
    from .recording import RejectedCall

    if isinstance(record.plan_error, RejectedCall):
        return f"plan's call {record.plan_error}, which the installed fully_shard does not take"
    if record.plan_error is not None:
        return f"plan raised {_first_line(record.plan_error)}"
    if not record.calls:
        return "plan made no fully_shard call"
    from ..checks.plan import rejected_call

    model = record.pristine
    rejected = rejected_call(model, calls_on(record, model), replicate_on(record, model))
    if rejected is not None:
        # FS2-4: FSDP2 rejects it, so no implementation can be judged on the plan
        return (f"plan's {rejected}, which FSDP2 rejects (a scalar cannot be sharded on dim 0): "
                "pass it in ignored_params or give it a dimension")
    return None


def plan_rule_violations(record) -> list[Violation]:
    """PLN-1..5 on a recorded plan: the rules about the calls on the model
    as it was before them (:func:`~pytest_fsdpcheck.checks.plan.check_plan`),
    and about the model the step trains, as the plan left it (parameters
    added after the calls, trainable ones ignored:
    :func:`~pytest_fsdpcheck.checks.plan.check_trained`). Each is the
    plan's mistake, so the user's: never an implementation's cell."""
    from ..checks.plan import check_plan, check_trained

    model = record.pristine
    out = check_plan(model, calls_on(record, model), replicate_on(record, model))
    after = record.model
    ignored_names = set().union(*(call.ignored or () for call in record.calls))
    ignored = {pid for pid, name in record.names.items() if name in ignored_names}
    try:
        owned = {id(p) for module in replicate_on(record, after) for p in module.parameters()}
    except AttributeError:  # the plan replaced a replicate module: its own params are still judged by check_plan
        owned = set()
    trainable = [(name, id(p)) for name, p in after.named_parameters() if p.requires_grad]
    before = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    out += check_trained(trainable, record.managed_after, ignored, owned, before, tuple(record.case.unreduced))
    return sorted(out, key=lambda v: v.invariant)


def _raise_plan_error(record):
    """A plan that cannot be recorded as a one-line :class:`CaseError`, for
    callers that record a plan outside the checks (the known-bug exposure,
    which still tells a plan breaking a PLN rule what torch does with it)."""
    problem = _plan_unusable(record.case)
    if problem is not None:
        raise CaseError(f"{case_label(record.case)}: {problem}")


# --- a check's case and implementation ----------------------------------------------


def _torch_impl():
    from ..impls import load_implementation

    return load_implementation("torch")


def _resolve(case, impl):
    if isinstance(impl, str):
        from ..impls import load_implementation

        impl = load_implementation(impl)
    if impl is None:
        impl = _torch_impl()
    if not isinstance(case, ModelCase):
        raise TypeError(f"a check takes a ModelCase, got {type(case).__name__}; run factories with run_check")
    problem = case_problem(case)
    if problem is not None:
        raise CaseError(problem)
    return case, impl
