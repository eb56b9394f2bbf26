"""What a FRAMEWORK pass records from a framework's layer hooks: a span per leaf-layer call, inside a
MODEL span per traced inference. Each framework supplies the hooks (PyTorch forward hooks, Gluon
block hooks); the spans they make are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlscope.runtime.trace.profiled import ProfiledPass, pass_attributes
from mlscope.runtime.trace.spans import new_span_id

__all__ = ["LayerRecorder"]


class LayerRecorder:
    """Turns `before`/`after` calls from layer hooks into FRAMEWORK layer spans.

    Args:
        profiled: the tracer (records the spans, on its clock), the pass's span (parent of the
            inference spans), the batch size (an attribute of every span) and the traced inferences.
        shapes: the shapes (lists of ints) of a hook's inputs or outputs.
        synchronize: waits for the device's queued work, so a layer's span covers its work (on a
            GPU, or MXNet's asynchronous engine); default: nothing to wait for.
    """

    def __init__(
        self,
        profiled: ProfiledPass,
        *,
        shapes: Callable[[Any], list[list[int]]],
        synchronize: Callable[[], None] = lambda: None,
    ) -> None:
        self.profiled = profiled
        self.tracer = profiled.tracer
        self.parent_id = profiled.parent_id
        self.base = pass_attributes("FRAMEWORK", profiled.batch_size)
        self.shapes = shapes
        self.synchronize = synchronize
        self._inference = self.parent_id
        self._index = 0
        self._open: list[tuple[int, list[list[int]]]] = []

    def before(self, inputs: Any) -> None:
        """A layer is called with `inputs`."""
        self.synchronize()
        self._open.append((self.tracer.clock.now(), self.shapes(inputs)))

    def after(self, path: str, layer_type: str, outputs: Any) -> None:
        """The layer at `path` (its class `layer_type`) returned `outputs`."""
        self.synchronize()
        end = self.tracer.clock.now()
        start, input_shapes = self._open.pop()
        attributes = {
            **self.base,
            "kind": "layer",
            "layer_type": layer_type,
            "layer": path,
            "layer_index": self._index,
            "input_shapes": input_shapes,
            "output_shapes": self.shapes(outputs),
        }
        self._index += 1
        self.tracer.add(path, "FRAMEWORK", start, end, parent_id=self._inference, attributes=attributes)

    def inferences(self, run: Callable[[], Any]) -> None:
        """Run the pass's traced inferences, each a MODEL span "inference" holding its layers."""
        for iteration in range(self.profiled.iterations):
            self._inference = new_span_id()
            self._index = 0
            self._open.clear()
            with self.tracer.span(
                "inference",
                "MODEL",
                parent_id=self.parent_id,
                span_id=self._inference,
                **self.base,
                iteration=iteration,
            ):
                run()
