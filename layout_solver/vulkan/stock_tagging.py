"""Stock's tagging as the solver's pass runs it: with the registry answers the pass's build already read.

The pass prices every candidate against stock's own tagging of the delegate graph (`passes._stock_prices`). Stock's
`set_op_node_tensor_reprs` asks the registry for a fresh `OpRepSets` for every op it tags; the build asked for the same
nodes moments before (about 40 ms of a MobileViT delegate's pass went to asking again). A scoped change to ExecuTorch,
like the pass swap in `hooks`, kept in its own module because `hooks` imports `passes`.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Iterator

from executorch.backends.vulkan import utils

_REGISTRY_SWAP = threading.Lock()  # one swap at a time: each restores what it found


@contextlib.contextmanager
def registry_answers_reused(answers: dict, texture_limits) -> Iterator[None]:
    """Inside this block, stock's tagging gets a node's op repsets from `answers` (node -> the `OpRepSets` the
    registry gave for it under `texture_limits`) instead of asking the registry for them again.

    Stock's `set_op_node_tensor_reprs` makes a fresh `OpRepSets` for every op it tags and narrows that one, so it
    gets a fresh copy: the same sync flags, its own lists of the same (never mutated) `TensorRepSet`s, which is what
    the registry returns for a node whose target, arguments and metadata are unchanged. Any other node, limit or
    thread's pass reads the registry as before (the answers are keyed by the node objects themselves).
    """
    from executorch.backends.vulkan._passes import tag_memory_meta_pass as tagging

    class Reused:
        def __init__(self, features):
            self.features = features

        def make_op_repsets(self, op_node, *limits):
            known = answers.get(op_node) if len(limits) == 1 and limits[0] is texture_limits else None
            if known is None:
                return self.features.make_op_repsets(op_node, *limits)
            fresh = copy.copy(known)
            fresh.args_repset_list = utils.TensorRepSetList(list(known.args_repset_list.vals))
            fresh.outs_repset_list = utils.TensorRepSetList(list(known.outs_repset_list.vals))
            return fresh

        def __getattr__(self, name):  # anything else stock reads of the op's features
            return getattr(self.features, name)

    with _REGISTRY_SWAP:
        original = tagging.get_op_features
        tagging.get_op_features = lambda target: Reused(original(target))
        try:
            yield
        finally:
            tagging.get_op_features = original
