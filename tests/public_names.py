"""The public function of an op key of the test tables.

The tables of the tests name the ONNX updates by their op keys
(``"momentum"``, ``"adagrad"``, ``"adam"``, as ``fastopt._ops`` does) and
the torch-named step functions by their rule keys (``"sgd_torch"``,
``"adagrad_torch"``, ``"adam_torch"``); :func:`op` returns the public
function of either, so a table keeps one key per rule.
"""
import fastopt

PUBLIC = {
    "momentum": "onnx_momentum",
    "adagrad": "onnx_adagrad",
    "adam": "onnx_adam",
    "sgd_torch": "sgd",
    "adagrad_torch": "adagrad",
    "adam_torch": "adam",
}


def op(key: str):
    """``fastopt.<public name of key>`` (a key without a row names itself)."""
    return getattr(fastopt, PUBLIC.get(key, key))
