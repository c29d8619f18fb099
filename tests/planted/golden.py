"""A planted exec-order bug for the golden corpus: parameters recorded in
reverse first-use order. Everything else is the reference's."""

from contextlib import contextmanager

from pytest_fsdpcheck.contract import Implementation


class _ReversedParams:
    def __init__(self):
        from pytest_fsdpcheck.reference.exec_order import ReferenceExecOrder

        self.inner = ReferenceExecOrder()

    @contextmanager
    def patch_tracer(self, tracer, root):
        with self.inner.patch_tracer(tracer, root) as info:
            yield info
        info.param_forward_order.reverse()


class ReversedParamOrder(Implementation):
    name = "planted-reversed-param-order"

    def __init__(self):
        self.exec_order = _ReversedParams()
