"""The flat layout's per-step check (fastopt/torch/_flatcheck.pyx).

It reads most facts as words of torch's own objects, at places learned from
probe tensors; every change the check must see is tried here both ways:
with the places learned, and with every tensor read through its
attributes.
"""
import pytest

torch = pytest.importorskip("torch")
import fastopt.torch as ft  # noqa: E402  (after the importorskip)
import fastopt.torch._flat as tf  # noqa: E402
from fastopt.torch import _flatcheck  # noqa: E402

# the shapes of the parameters: 0-d, 1 to 5 dimensions, and 6 (whose sizes
# torch keeps out of place: read through the attributes)
SHAPES = [(3, 3), (3, 3), (), (7,), (2, 1, 3), (1, 2, 1, 2, 1), (1, 1, 2, 1, 1, 2)]


@pytest.fixture(params=["words", "attributes"])
def path(request):
    """Each test once with the places learned, once without."""
    if request.param == "attributes":
        _flatcheck.forget_fields()
    yield request.param
    assert _flatcheck.learn_fields(tf._probes()) is not None


def trained(dtype=torch.float32):
    """A flat SGD with momentum, two steps into the layout."""
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g, dtype=dtype)) for s in SHAPES]
    opt = ft.SGD(ps, lr=0.1, momentum=0.9, flat=True)
    for _ in range(3):
        for p in ps:        # as backward does: into the gradient there
            got = torch.randn(p.shape, generator=g, dtype=dtype)
            if p.grad is None:
                p.grad = got
            else:
                p.grad.copy_(got)
        opt.step()
        opt.zero_grad(set_to_none=False)
    assert opt._flat.rec is not None and opt._flat.rec.check.check() == 0
    return ps, opt


def test_this_torch_keeps_the_facts_where_they_are_learned():
    assert tf.FIELDS is not None
    assert set(tf.FIELDS) == {"impl", "storage", "offset", "dims", "dtype"}
    # four places in a TensorImpl, none inside another's (the dims' place is
    # followed by five sizes and five strides)
    dims = tf.FIELDS["dims"]
    assert all(not dims <= tf.FIELDS[k] < dims + 88 for k in ("storage", "offset", "dtype"))
    assert len({tf.FIELDS[k] for k in ("storage", "offset", "dims", "dtype")}) == 4


def test_this_torch_keeps_which_gradient_a_parameter_holds_where_it_is_learned():
    assert tf.GRAD_FIELDS is not None and set(tf.GRAD_FIELDS) == {"meta", "grad"}
    assert tf.GRAD_FIELDS["meta"] not in {tf.FIELDS[k] for k in ("storage", "offset", "dims",
                                                                  "dtype")}


def test_tensors_that_all_keep_an_autograd_record_teach_no_gradient_place():
    """Views keep an autograd record: as the tensors without gradients,
    no word tells the parameters apart from them. Nothing is learned, and
    every gradient is read through torch's getter."""
    params, _ = tf._grad_probes()
    try:
        assert _flatcheck.learn_grad_fields(params, tf._probes()) is None
        ps, opt = trained()
        assert opt._flat.rec.check.read_as_words()[3] == 0
        ps[1].grad = torch.zeros_like(ps[1])
        assert opt._flat.rec.check.check() == 1
    finally:
        assert _flatcheck.learn_grad_fields(*tf._grad_probes()) is not None


def test_a_check_built_before_the_gradient_places_are_unlearned_reads_no_words_of_them():
    """A check built with the places learned, then the places forgotten (a
    relearning that finds none): the getter decides, and sees every move."""
    ps, opt = trained()
    check = opt._flat.rec.check
    assert check.read_as_words()[3] > 0
    try:
        assert _flatcheck.learn_grad_fields(tf._grad_probes()[0], tf._probes()) is None
        assert check.check() == 0
        ps[1].grad = torch.zeros_like(ps[1])
        assert check.check() == 1
    finally:
        assert _flatcheck.learn_grad_fields(*tf._grad_probes()) is not None


def test_probes_that_cannot_tell_the_places_apart_teach_nothing():
    try:
        two_dtypes = [p for p in tf._probes() if p.dtype in (torch.float32, torch.float64)]
        assert _flatcheck.learn_fields(two_dtypes) is None
        ps, opt = trained()
        assert opt._flat.rec.check.read_as_words() == (0, 0, 0, 0)
    finally:
        assert _flatcheck.learn_fields(tf._probes()) is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16,
                                   torch.float16])
def test_every_tensor_confirms_but_those_of_six_dimensions(dtype, path):
    ps, opt = trained(dtype)
    n = len(SHAPES) - 1
    want = (n, n, n, n) if path == "words" else (0, 0, 0, 0)
    assert opt._flat.rec.check.read_as_words() == want


def _swap(p):
    """p's Python object takes another TensorImpl, which holds p's gradient."""
    other = torch.nn.Parameter(torch.zeros_like(p))
    other.grad = p.grad
    torch.utils.swap_tensors(p, other)


def _retype(t, dtype):
    t.data = t.data.view(dtype)


def _state(opt, p):
    return opt.state[p]["momentum_buffer"]


def _transpose_(t):
    with torch.no_grad():
        t.t_()


# what a user may do to a tensor of the layout between steps, and the
# check's answer: 1 declines this step, 2 builds the layout anew
MOVES = {
    "parameter cloned": (lambda ps, opt: setattr(ps[0], "data", ps[0].data.clone()), 2),
    "parameter at another's place": (lambda ps, opt: setattr(ps[0], "data", ps[1].data), 2),
    "parameter reshaped": (lambda ps, opt: setattr(ps[0], "data", ps[0].data.view(1, 9)), 2),
    "parameter transposed": (lambda ps, opt: setattr(ps[0], "data", ps[0].data.t()), 2),
    "parameter transposed in place": (lambda ps, opt: _transpose_(ps[0]), 2),
    "parameter of six dimensions cloned": (
        lambda ps, opt: setattr(ps[6], "data", ps[6].data.clone()), 2),
    "parameter swapped": (lambda ps, opt: _swap(ps[3]), 2),
    "gradient replaced": (lambda ps, opt: setattr(ps[1], "grad", torch.zeros_like(ps[1])), 1),
    "gradient set to None": (lambda ps, opt: setattr(ps[3], "grad", None), 1),
    "gradient of another parameter": (lambda ps, opt: setattr(ps[0], "grad", ps[1].grad), 1),
    "gradient swapped away": (
        lambda ps, opt: torch.utils.swap_tensors(ps[3], torch.nn.Parameter(ps[3] * 1)), 1),
    "memory shared": (lambda ps, opt: ps[2].share_memory_(), 2),
    "gradient cloned": (lambda ps, opt: setattr(ps[4].grad, "data", ps[4].grad.data.clone()),
                        1),
    "gradient at another's place": (
        lambda ps, opt: setattr(ps[0].grad, "data", ps[1].grad.data), 1),
    "gradient re-typed": (lambda ps, opt: _retype(ps[3].grad, torch.int32), 1),
    "gradient transposed in place": (lambda ps, opt: ps[0].grad.t_(), 1),
    "gradient of six dimensions cloned": (
        lambda ps, opt: setattr(ps[6].grad, "data", ps[6].grad.data.clone()), 1),
    "state cloned": (lambda ps, opt: setattr(_state(opt, ps[5]), "data",
                                             _state(opt, ps[5]).clone()), 2),
    "state re-typed": (lambda ps, opt: _retype(_state(opt, ps[3]), torch.int32), 2),
    "state transposed": (lambda ps, opt: setattr(_state(opt, ps[0]), "data",
                                                 _state(opt, ps[0]).data.t()), 2),
    # the same memory through another storage object: a gradient holds
    "gradient over another storage": (lambda ps, opt: setattr(
        ps[4].grad, "data", torch.from_numpy(ps[4].grad.numpy())), 0),
}


@pytest.mark.parametrize("move", list(MOVES))
def test_the_check_sees_what_moved(move, path):
    ps, opt = trained()
    edit, code = MOVES[move]
    edit(ps, opt)
    assert opt._flat.rec.check.check() == code


def _run(flat, edit, steps=6):
    """SGD with momentum, flat or not, over three parameters; edit(ps, opt,
    k) before each step k; the parameters after."""
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in [(4, 4), (3,), (2, 3)]]
    opt = ft.SGD(ps, lr=0.1, momentum=0.9, flat=flat)
    for k in range(steps):
        edit(ps, opt, k)
        opt.zero_grad(set_to_none=False)
        sum(((p * (torch.arange(p.numel()).reshape(p.shape) + 1)) ** 2).sum()
            for p in ps).backward()
        opt.step()
    return [p.detach().clone() for p in ps]


def _aliased_then_shared(ps, opt, k):
    """p.data over another storage object of the same memory; two steps
    later that storage's memory moves (share_memory_)."""
    if k == 2:
        ps[0].data = torch.from_numpy(ps[0].detach().numpy())
    if k == 4:
        ps[0].share_memory_()


def _aliased_then_freed(ps, opt, k):
    """The same, then p moves to new memory (the other storage freed)."""
    if k == 2:
        ps[0].data = torch.from_numpy(ps[0].detach().numpy())
    if k == 4:
        ps[0].data = torch.from_numpy(ps[0].detach().numpy().copy())


@pytest.mark.parametrize("edit", [_aliased_then_shared, _aliased_then_freed])
def test_a_parameter_on_another_storage_is_followed(edit, path):
    """A tensor is read as words only on the layout's own storages (which
    the check holds and whose addresses it reads every step)."""
    flat, plain = _run(True, edit), _run(False, edit)
    for a, b in zip(flat, plain):
        assert torch.equal(a, b)


def test_a_parameter_re_typed_in_place(path):
    """bfloat16 over float16's memory: the same storage, offset and shape."""
    ps, opt = trained(torch.float16)
    _retype(ps[3], torch.bfloat16)
    assert opt._flat.rec.check.check() == 2


def test_a_reshape_back_and_forth_still_holds(path):
    """What the check compares is the facts, not how they came about."""
    ps, opt = trained()
    ps[0].data = ps[0].data.view(1, 9).view(3, 3)
    assert opt._flat.rec.check.check() == 0
    ps[0].grad = torch.ones(3, 3)       # a gradient that is not the layout's
    assert opt._flat.rec.check.check() == 1
