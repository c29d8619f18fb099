"""Planted models and plans for the PLN rules: a correct plan (layers
deepest first, tied modules in one call, the root last) and one plan
breaking each rule. Each plan calls ``fully_shard`` as a framework does,
through a different import path, so the recorder must catch them all."""

import contextlib
import dataclasses
import importlib

import torch
from torch import nn
from torch.distributed._composable.fsdp import fully_shard as composable_fully_shard
from torch.distributed.fsdp import fully_shard

from pytest_fsdpcheck.cases import ModelCase, model_factory
from tests.planted import torch_faults

# FS2-9's ranks build their case from this module: a fault planted in torch
# for the killers reaches them here (tests.planted.torch_faults)
torch_faults.plant_in_this_process()

WIDTH = 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))

    def forward(self, x):
        return x + self.mlp(self.norm(x))


class TinyLM(nn.Module):
    def __init__(self, depth=2, tied=True, vocab=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(depth))
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def good_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model, mesh=mesh)


def tied_split_plan(model, mesh):  # PLN-1: embed and lm_head in two groups
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model.lm_head, mesh=mesh)
    fully_shard(model, mesh=mesh)


def shared_module_plan(model, mesh):  # PLN-2: one Linear reachable from both layers' groups
    for layer in model.layers:
        composable_fully_shard(layer, mesh=mesh)
    composable_fully_shard([model.embed, model.lm_head], mesh=mesh)
    composable_fully_shard(model, mesh=mesh)


def unsharded_root_plan(model, mesh):  # PLN-3 (the root's own modules) and PLN-4 (no root call)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)


def root_first_plan(model, mesh):  # PLN-4: the root before its layers
    fully_shard(model, mesh=mesh)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)


def root_never_sharded_plan(model, mesh):  # PLN-4 alone: every parameter in a group, the root in none
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model.norm, mesh=mesh)


def _inputs():
    return (torch.randint(0, 16, (2, 5), generator=torch.Generator().manual_seed(0)),)


def _case(name, plan, **kw):
    torch.manual_seed(0)
    return ModelCase(name, TinyLM(), _inputs(), plan=plan, **kw)


def good():
    return _case("good", good_plan, fsdp1_units=("layers.0", "layers.1", ("embed", "lm_head")))


def tied_split():
    return _case("tied_split", tied_split_plan)


def shared_module():
    torch.manual_seed(0)
    model = TinyLM()
    model.layers[1].mlp[0] = model.layers[0].mlp[0]  # one Linear in both layers (no group of its own)
    return ModelCase("shared_module", model, _inputs(), plan=shared_module_plan)


def unsharded_root():
    return _case("unsharded_root", unsharded_root_plan)


def root_first():
    return _case("root_first", root_first_plan)


def root_never_sharded():
    return _case("root_never_sharded", root_never_sharded_plan)


class Adapter(nn.Module):
    """A LoRA-style low-rank adapter beside a frozen Linear."""

    def __init__(self, base: nn.Linear, rank: int = 2):
        super().__init__()
        self.base = base
        self.lora_a = nn.Linear(base.in_features, rank, bias=False)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False)

    def forward(self, x):
        return self.base(x) + self.lora_b(self.lora_a(x))


def adapters_after_plan(model, mesh):  # PLN-3: the adapters are added after the layers' groups exist
    good_plan(model, mesh)
    for layer in model.layers:
        layer.mlp[0] = Adapter(layer.mlp[0])


def adapters_after():
    return _case("adapters_after", adapters_after_plan)


def ignored_trainable_plan(model, mesh):  # PLN-5: a trainable parameter ignored, so reduced by no one
    ignored = {model.layers[0].mlp[0].weight}
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, ignored_params=ignored)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model, mesh=mesh, ignored_params=ignored)


def ignored_trainable():
    return _case("ignored_trainable", ignored_trainable_plan)


def ignored_declared():
    """The same plan, its ignored parameter named as the framework's to reduce: no PLN-5."""
    return _case("ignored_declared", ignored_trainable_plan, unreduced=("layers.0.mlp.*",))


class LockedLM(TinyLM):
    """A model holding a lock (as a framework's logging or cache does): deepcopy refuses it."""

    def __init__(self):
        super().__init__()
        import threading

        self.lock = threading.Lock()


def uncopyable():
    torch.manual_seed(0)
    return ModelCase("uncopyable", LockedLM(), _inputs(), plan=good_plan)


def plain():
    """The simplest factory: no plan, just the model and its inputs."""
    torch.manual_seed(0)
    return TinyLM(), _inputs()


@model_factory(depth=__import__("hypothesis").strategies.integers(1, 3),
               tied=__import__("hypothesis").strategies.booleans())
def drawn(depth=2, tied=True):
    torch.manual_seed(0)
    plan = good_plan if tied else untied_plan
    return ModelCase("drawn", TinyLM(depth=depth, tied=tied), _inputs(), plan=plan)


def untied_plan(model, mesh):
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


@model_factory(depth=__import__("hypothesis").strategies.integers(1, 4))
def deep_tied_split(depth=1):
    """Breaks PLN-1 only from depth 3 on: shrinking must find depth=3."""
    torch.manual_seed(0)
    return ModelCase("deep_tied_split", TinyLM(depth=depth), _inputs(),
                     plan=tied_split_plan if depth >= 3 else good_plan)



def rank_scaled_plan(model, mesh):  # FS2-9: one rank's shard of layers.1.mlp.2.weight rescaled after sharding
    good_plan(model, mesh)
    with torch.no_grad():
        model.layers[1].mlp[2].weight.to_local().mul_(1 + mesh.get_local_rank())


def rank_scaled():
    return _case("rank_scaled", rank_scaled_plan)


# --- FS2-9 at the plan's own precision (issue 28) ------------------------------------

def _bf16_policy(reduce_dtype=torch.float32):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)


def bf16_plan(model, mesh):  # correct: every group computes in bf16 and reduces in fp32
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_bf16_policy())
    fully_shard(model, mesh=mesh, mp_policy=_bf16_policy())


def bf16_last_block_plan(model, mesh):  # correct: the plan (torchtitan's default)
    for i, layer in enumerate(model.layers):
        last = i == len(model.layers) - 1
        fully_shard(layer, mesh=mesh, mp_policy=_bf16_policy(), reshard_after_forward=not last)
    fully_shard(model, mesh=mesh, mp_policy=_bf16_policy())


def bf16_doubled_plan(model, mesh):  # wrong: layers.1's gradients summed over the ranks, not averaged
    bf16_plan(model, mesh)
    model.layers[1].set_gradient_divide_factor(1.0)
    model.layers[1].set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


def bf16_dropped_plan(model, mesh):  # wrong: layers.0's gradients never reduced (sync left off)
    bf16_plan(model, mesh)
    model.layers[0].set_requires_gradient_sync(False, recurse=False)


def bf16_reduced_in_bf16_plan(model, mesh):
    """Wrong: every call asks for fp32 reduction, but the groups are then
    told bf16 (a framework patching the policy after the call, or an FSDP
    that ignores reduce_dtype): gradients are summed over the ranks in bf16."""
    bf16_plan(model, mesh)
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        if group is not None:
            group.mp_policy = _bf16_policy(reduce_dtype=torch.bfloat16)


def bf16():
    return _case("bf16", bf16_plan)


def bf16_last_block():
    return _case("bf16_last_block", bf16_last_block_plan)


def bf16_doubled():
    return _case("bf16_doubled", bf16_doubled_plan)


def bf16_dropped():
    return _case("bf16_dropped", bf16_dropped_plan)


def bf16_reduced_in_bf16():
    return _case("bf16_reduced_in_bf16", bf16_reduced_in_bf16_plan)


# --- FS2-9 with randomness in the step (issue 28) ------------------------------------

class DropoutBlock(Block):
    def __init__(self, p=0.1):
        super().__init__()
        self.drop = nn.Dropout(p)

    def forward(self, x):
        return x + self.drop(self.mlp(self.norm(x)))


class DropoutLM(TinyLM):
    """TinyLM with dropout in every block and a random mask drawn in the root's forward."""

    def __init__(self, depth=2):
        super().__init__(depth=depth, tied=False)
        self.layers = nn.ModuleList(DropoutBlock() for _ in range(depth))

    def forward(self, tokens):
        h = self.embed(tokens)
        h = h * (torch.rand_like(h) > 0.05)  # a random mask of the framework's own
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def dropout():
    torch.manual_seed(0)
    return ModelCase("dropout", DropoutLM(), _inputs(), plan=untied_plan)


def dropout_bf16():
    torch.manual_seed(0)
    return ModelCase("dropout_bf16", DropoutLM(), _inputs(), plan=bf16_last_block_plan)


class BatchNormLM(TinyLM):
    def __init__(self):
        super().__init__(tied=False)
        self.bn = nn.BatchNorm1d(WIDTH)

    def forward(self, tokens):
        h = self.embed(tokens)
        h = self.bn(h.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


def batchnorm():
    torch.manual_seed(0)
    return ModelCase("batchnorm", BatchNormLM(), _inputs(), plan=untied_plan)


def ignored_plan(model, mesh):  # correct: an ignored parameter is never reduced: each rank keeps its own gradient
    ignored = {model.layers[0].mlp[0].weight}
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, ignored_params=ignored)
    fully_shard(model, mesh=mesh, ignored_params=ignored)


def ignored():
    # each rank keeping its own gradient is what this case checks: said so
    return _case("ignored", ignored_plan, unreduced=("layers.0.mlp.0.weight",))


def _local_reduce_scatter():
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter

    class LocalReduceScatter(DefaultReduceScatter):
        """Each rank keeps its own chunk: no communication, nothing averaged."""

        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            output_tensor.copy_(input_tensor.view(group.size(), -1)[group.rank()].view_as(output_tensor))
            return None

    return LocalReduceScatter()


def bf16_unreduced_plan(model, mesh):  # wrong: layers.0's gradients never leave their rank
    bf16_plan(model, mesh)
    model.layers[0].set_custom_reduce_scatter(_local_reduce_scatter())


def bf16_unreduced():
    return _case("bf16_unreduced", bf16_unreduced_plan)


def unreduced_plan(model, mesh):  # wrong, fp32: layers.0's gradients never leave their rank
    untied_plan(model, mesh)
    model.layers[0].set_custom_reduce_scatter(_local_reduce_scatter())


def unreduced():
    torch.manual_seed(0)
    return ModelCase("unreduced", TinyLM(tied=False), _inputs(), plan=unreduced_plan)


class FloatMLP(nn.Module):
    """Floating-point inputs, so a policy's input and output casts matter."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(2))
        self.head = nn.Linear(WIDTH, 3)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def bf16_casts_plan(model, mesh):  # correct: fp32 inputs cast at the root, blocks.0's output cast back to fp32
    from torch.distributed.fsdp import MixedPrecisionPolicy

    for i, block in enumerate(model.blocks):
        fully_shard(block, mesh=mesh, mp_policy=MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32, output_dtype=torch.float32 if i == 0 else None))
    fully_shard(model, mesh=mesh, mp_policy=_bf16_policy())


def bf16_casts():
    torch.manual_seed(0)
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1))
    return ModelCase("bf16_casts", FloatMLP(), (x,), plan=bf16_casts_plan)


# --- issue 28 item 5: checks on users' plans that can fail for their reason ----------

def tied_ignored_plan(model, mesh):
    """Correct: the tied weight is ignored by the one call reaching it (the
    root's), so it is in no group and a plain tensor in both modules; the
    head's bias keeps lm_head in the root's group, embed (all ignored, no
    buffer) in none. Not PLN-1: no two groups manage the weight."""
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh, ignored_params={model.embed.weight})


def tied_ignored():
    torch.manual_seed(0)
    model = TinyLM()
    model.lm_head = nn.Linear(WIDTH, 16)
    model.lm_head.weight = model.embed.weight
    return ModelCase("tied_ignored", model, _inputs(), plan=tied_ignored_plan, unreduced=("embed.weight",))


def tied_half_ignored_plan(model, mesh):  # PLN-1: embed's group manages the tied weight, lm_head's call ignores it
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model.embed, mesh=mesh)
    fully_shard(model, mesh=mesh, ignored_params={model.embed.weight})


def tied_half_ignored():
    case = tied_ignored()
    return ModelCase("tied_half_ignored", case.model, case.example_inputs, plan=tied_half_ignored_plan,
                     unreduced=case.unreduced)


@contextlib.contextmanager
def _states_dropping(param):
    """Inside the block FSDP2's state collection leaves ``param`` out, as an
    FSDP2 that forgets a parameter would (the plan's stand-in for a bug in
    torch's walk)."""
    patched = []
    for name in ("torch.distributed.fsdp._fully_shard._fsdp_init", "torch.distributed.fsdp._fully_shard._fully_shard"):
        module = importlib.import_module(name)
        original = module.__dict__.get("_get_managed_states")
        if original is None:
            continue

        def dropping(*args, _original=original, **kwargs):
            params, buffers = _original(*args, **kwargs)
            return [p for p in params if p is not param], buffers

        patched.append((module, original))
        module._get_managed_states = dropping
    try:
        yield
    finally:
        for module, original in patched:
            module._get_managed_states = original


def left_out_plan(model, mesh):  # wrong: layers.0.mlp.0.weight in no group (never reduced), though the spec's walk shards it
    for i, layer in enumerate(model.layers):
        with _states_dropping(layer.mlp[0].weight) if i == 0 else contextlib.nullcontext():
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def left_out():
    torch.manual_seed(0)
    return ModelCase("left_out", TinyLM(tied=False), _inputs(), plan=left_out_plan)


class EagerLM(TinyLM):
    @torch._dynamo.disable
    def forward(self, tokens):
        return super().forward(tokens)


def dynamo_disabled():
    """A forward Dynamo never enters: the compiled step compiles nothing."""
    torch.manual_seed(0)
    return ModelCase("dynamo_disabled", EagerLM(tied=False), _inputs(), plan=untied_plan)


def compiled_blocks():
    """torchtitan's pattern: each block compiled on its own
    (``torch.compile(block)``, an ``OptimizedModule`` forwarding attribute
    reads and writes to the block) before the plan shards it. Correct."""
    torch.manual_seed(0)
    model = TinyLM()
    for i, layer in enumerate(model.layers):
        model.layers[i] = torch.compile(layer)
    return ModelCase("compiled_blocks", model, _inputs(), plan=good_plan)


def checkpointed_blocks():
    """Each block wrapped for activation checkpointing (``checkpoint_wrapper``,
    forwarding attribute reads to the block) before the plan shards it. Correct."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch.manual_seed(0)
    model = TinyLM()
    for i, layer in enumerate(model.layers):
        model.layers[i] = checkpoint_wrapper(layer)
    return ModelCase("checkpointed_blocks", model, _inputs(), plan=good_plan)


def no_reshard_plan(model, mesh):  # correct: the layers keep their parameters gathered after forward
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=False)
    fully_shard([model.embed, model.lm_head], mesh=mesh)
    fully_shard(model, mesh=mesh)


def no_reshard():
    return _case("no_reshard", no_reshard_plan)


# --- FS2-9 on frameworks' stacks (issue 38 items 2 and 3) -----------------------------


class CheckpointedBlock(Block):
    """torch.utils.checkpoint around the block's MLP: its forward runs again
    in the backward, with whatever parameters the modules then hold."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return x + checkpoint(lambda h: self.mlp(self.norm(h)), x, use_reentrant=False)


class CheckpointedLM(TinyLM):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(CheckpointedBlock() for _ in range(2))


def checkpointed_bf16():
    """Activation checkpointing under a bf16 MixedPrecisionPolicy (fp32
    reduction): ``torch.utils.checkpoint`` in each block, one block behind
    ``checkpoint_wrapper`` too. Correct: FSDP2 gives the recompute the same
    bf16 parameters as the forward. An FS2-9 control that swapped bf16
    parameters in for the forward only made torch's recompute raise
    ``CheckpointError`` (issue 38 item 2)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    torch.manual_seed(0)
    model = CheckpointedLM()
    model.layers[1] = checkpoint_wrapper(Block())
    return ModelCase("checkpointed_bf16", model, _inputs(), plan=bf16_plan)


class RoutedLM(nn.Module):
    """An MoE block after bf16 decoder blocks, its router kept in fp32 (as
    frameworks do for stable top-k): the router's gradient is computed
    through the bf16 blocks upstream of it."""

    def __init__(self, experts=2, vocab=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, WIDTH)
        self.layers = nn.ModuleList(Block() for _ in range(2))
        self.router = nn.Linear(WIDTH, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(experts))
        self.norm = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, vocab, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        gates = torch.softmax(self.router(h.float()), dim=-1)
        mixed = sum(gates[..., i:i + 1] * expert(h).float() for i, expert in enumerate(self.experts))
        return self.lm_head(self.norm(h + mixed.to(h.dtype)))


def fp32_router_plan(model, mesh):  # correct: bf16 blocks and root, the router its own fp32 group
    from torch.distributed.fsdp import MixedPrecisionPolicy

    for layer in model.layers:
        fully_shard(layer, mesh=mesh, mp_policy=_bf16_policy())
    fully_shard(model.router, mesh=mesh,
                mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32))
    fully_shard(model, mesh=mesh, mp_policy=_bf16_policy())


def fp32_router():
    """bf16 blocks, an fp32 router linear downstream of them (issue 38 item
    3): compiled, its gradient differs from eager by about a percent with
    no FSDP at all; that is the model's own noise, never torch's FAIL."""
    torch.manual_seed(0)
    return ModelCase("fp32_router", RoutedLM(), _inputs(), plan=fp32_router_plan)


def fp32_router_doubled_plan(model, mesh):  # wrong: the router's gradients summed over the ranks, not averaged
    fp32_router_plan(model, mesh)
    model.router.set_gradient_divide_factor(1.0)
    model.router.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


def fp32_router_doubled():
    torch.manual_seed(0)
    return ModelCase("fp32_router_doubled", RoutedLM(), _inputs(), plan=fp32_router_doubled_plan)


# --- a world too slow to judge (exit status: environment ERROR) ------------------------

class SlowInRanks(TinyLM):
    """An instant in the parent; in the ranks of a process group its
    forward waits a minute, so FS2-9's ranks are killed at their limit in
    the unsharded control: a world too slow to judge, never a verdict."""

    def forward(self, tokens):
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            import time

            time.sleep(60)
        return super().forward(tokens)


def slow_in_ranks():
    torch.manual_seed(0)
    return ModelCase("slow_in_ranks", SlowInRanks(), _inputs(), plan=good_plan)


def good_on_hsdp():
    """``good``'s plan trained on a 2 x 16 HSDP mesh (the case states it):
    the simulated tier checks it there, 16 shards a replica."""
    return dataclasses.replace(good(), name="good_on_hsdp", mesh_shape=(2, 16))


def _torchrun_worker_plan(model, mesh):
    """``good_plan``, run only in a process torchrun's agent started (its
    parent runs ``torch.distributed.run``): in ranks the suite spawned
    itself, the plan raises and FS2-9 fails, so a pass shows that the plan
    ran on torchrun's own ranks."""
    import os

    with open(f"/proc/{os.getppid()}/cmdline", "rb") as parent:
        command = parent.read().replace(b"\0", b" ").decode(errors="replace")
    if "torch.distributed.run" not in command:
        raise RuntimeError(f"the plan ran in a rank that torchrun's agent did not start (its parent: {command!r})")
    good_plan(model, mesh)


def on_torchrun_ranks():
    return _case("on_torchrun_ranks", _torchrun_worker_plan)


# --- the framework's own training step (ModelCase.micro_batches, .optimizer) ---------


def adamw(model):
    """A framework's optimizer: AdamW, weight decay on matrices only."""
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    return torch.optim.AdamW([{"params": [p for _, p in trainable if p.dim() > 1], "weight_decay": 0.1},
                              {"params": [p for _, p in trainable if p.dim() <= 1], "weight_decay": 0.0}], lr=1e-2)


def accumulating():
    """Correct: two micro-batches accumulated (sync off for the first), then AdamW."""
    return _case("accumulating", good_plan, micro_batches=2, optimizer=adamw)


def accumulating_bf16():
    """Correct: the same step at bf16 parameters and fp32 reduction."""
    return _case("accumulating_bf16", bf16_plan, micro_batches=2, optimizer=adamw)


def micro_batches_uneven():
    """The user's mistake: three micro-batches of a batch of two."""
    return _case("micro_batches_uneven", good_plan, micro_batches=3)


def optimizer_broken():
    """The user's mistake: an optimizer that fails on the plain model too."""
    return _case("optimizer_broken", good_plan, optimizer=lambda model: torch.optim.SGD(model.parameters(), lr=-1.0))


def bf16_dropped_accumulating():
    """Wrong, as bf16_dropped: layers.0's sync left off by the plan, with two micro-batches."""
    return _case("bf16_dropped_accumulating", bf16_dropped_plan, micro_batches=2)


# --- FS2-9 with per-rank data that reaches different parameters (issue 57, family 4) ----

EXPERTS = 4


class ExpertsLM(TinyLM):
    """TinyLM with a routed (MoE-style) layer after its blocks: each
    sequence goes to one expert, picked by its first token, and an expert
    no sequence of the batch picks is not called. On FS2-9's per-rank
    batches rank 0 reaches experts 0 and 3, rank 1 experts 1 and 3, and no
    rank expert 2: ranks use different parameters, as a real MoE on
    per-rank data does."""

    def __init__(self):
        super().__init__(tied=False)
        self.experts = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(EXPERTS))

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        route = tokens[:, 0] % EXPERTS
        for index, expert in enumerate(self.experts):
            chosen = route == index
            if bool(chosen.any()):  # a data-dependent branch: an expert no sequence picks is not called
                h = h + expert(h) * chosen[:, None, None].to(h.dtype)
        return self.lm_head(self.norm(h))


def routed_plan(model, mesh):  # correct: the experts in the root's group, which reduces unused parameters
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.set_reduce_scatter_unused_params(True)


def routed_unflagged_plan(model, mesh):  # the user's mistake: ranks use different parameters, no zero gradients
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def routed_experts_sharded_plan(model, mesh):  # the user's mistake: a group per expert, skipped by some ranks
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    for expert in model.experts:
        fully_shard(expert, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.set_reduce_scatter_unused_params(True)


def _routed(name, plan):
    torch.manual_seed(0)
    return ModelCase(name, ExpertsLM(), _inputs(), plan=plan)


def routed():
    return _routed("routed", routed_plan)


def routed_unflagged():
    return _routed("routed_unflagged", routed_unflagged_plan)


def routed_experts_sharded():
    return _routed("routed_experts_sharded", routed_experts_sharded_plan)


class AuxHeadLM(TinyLM):
    """TinyLM with an auxiliary head, its own group, run on every batch but
    added to the output only where the batch's first token is even
    (pytorch#158719's shape: a group's output feeds the loss on some ranks
    only). On FS2-9's per-rank batches rank 0's output takes it, rank 1's
    does not: every rank calls the head, only rank 0 reaches its parameters."""

    def __init__(self):
        super().__init__(tied=False)
        self.aux = nn.Linear(WIDTH, WIDTH)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        extra = self.aux(h)
        if bool(tokens[0, 0] % 2 == 0):  # data-dependent: the head's output is used on some batches only
            h = h + extra
        return self.lm_head(self.norm(h))


def aux_head_plan(model, mesh):  # keeps FSDP2's per-rank step: every group's module called, unused reduced
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model.aux, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.set_reduce_scatter_unused_params(True)


def aux_head():
    torch.manual_seed(0)
    return ModelCase("aux_head", AuxHeadLM(), _inputs(), plan=aux_head_plan)
