"""OnnxModel: an ONNX model run by ONNX Runtime (PyPI `onnxruntime`, `onnxruntime-gpu` on a GPU) on each
document's tensor, a shipped Python executor (issue 53 §3). In a flow:

    executors:
      - name: onnx
        uses: OnnxModel
        py_modules: [flowline:onnx_model]      # the shipped file, beside the worker script
        batching: {max_batch_size: 64, max_delay_ms: 2}
        with: {model: model.onnx, input: tensor, output: embedding}

As TorchModule: `input` (tensor or embedding) is the field read, `output` (embedding or tensor) the field
written with the model's output row for that document (float32). Documents whose input tensors have one
shape are stacked into one [N, ...] array (at most `batch_size` rows per run); documents without the input
field pass through. The model's first input takes the stack (`input_name` picks another); an input named
attention_mask gets ones and token_type_ids zeros of the stack's shape (a BERT fed its token ids); any other
input is an error when the executor starts. The first output (`output_name` picks another) must have one
row per document. `device`: cpu, or cuda / cuda:N (the CUDA execution provider with IOBinding: inputs copied to the GPU once,
outputs bound there and copied back once; a missing provider is an error). Without it, the replica's device
as the flow gives it (the executor's `device:` / `devices:`, "auto" decided: runtime["device"]); a GPU there
with an onnxruntime that has no CUDA execution provider runs on the CPU and says so in the log.
`model` is relative to the flow file's folder. `threads`: ONNX Runtime's intra-op threads (0: its default).
`concurrency`: requests a worker runs at once on the session (default 2 on a GPU, where one request's Python
work then overlaps the other's model run, 1 on the CPU, where a run takes every core).
`tf32`: let the CUDA provider multiply fp32 in TF32 (onnxruntime's own default; off here, so that fp32 results
stay fp32's: on, they differ from the CPU's by ~1e-3 relative).
"""

import os
import sys

import flowline

try:
    import numpy as np
except ImportError:  # the worker reports it when the executor is built
    np = None

TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
         "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
         "tensor(bool)": "bool"}
FIELDS = ("tensor", "embedding")


class OnnxModel(flowline.Executor):
    """Run an ONNX model (ONNX Runtime) on each document's tensor or embedding."""

    def __init__(self, model, device=None, input="tensor", output="embedding", input_name=None, output_name=None,
                 batch_size=64, threads=0, tf32=False, concurrency=None, **kwargs):
        super().__init__(**kwargs)
        try:
            import onnxruntime
        except ImportError as e:
            raise RuntimeError(f"OnnxModel needs onnxruntime in this Python: pip install onnxruntime ({e})") from None
        if input not in FIELDS or output not in FIELDS:
            raise ValueError(f"OnnxModel: input and output are one of {', '.join(FIELDS)}, got {input!r}, {output!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"OnnxModel: batch_size must be an integer >= 1, got {batch_size!r}")
        path = model if os.path.isabs(model) else os.path.join(self.runtime.get("flow_dir", os.getcwd()), model)
        if not os.path.exists(path):
            raise FileNotFoundError(f"OnnxModel: model {path} does not exist")
        self.cuda = None  # the CUDA device index when the model runs there (IOBinding)
        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = int(threads)
        providers = ["CPUExecutionProvider"]
        if device is None:  # the flow's device for this replica
            device = self.runtime.get("device", "cpu")
            if device.startswith("cuda") and "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
                print(f"OnnxModel: the flow gives this replica {device}, but this onnxruntime has no CUDA execution "
                      "provider (pip install onnxruntime-gpu): running on the CPU", file=sys.stderr, flush=True)
                device = "cpu"
        if not isinstance(device, str):
            raise ValueError(f"OnnxModel: device is cpu, cuda or cuda:N, got {device!r}")
        if device.startswith("cuda"):
            if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
                raise RuntimeError(f"OnnxModel: device {device}, but this onnxruntime has no CUDA execution provider "
                                   "(pip install onnxruntime-gpu)")
            index = int(device.split(":", 1)[1]) if ":" in device else 0
            # TF32 off unless asked: onnxruntime's CUDA provider turns it on by default, and fp32 products then
            # carry fp16's 10-bit mantissa (relative differences of 1e-3 against the CPU, seen on an H200)
            providers = [("CUDAExecutionProvider", {"device_id": index, "use_tf32": "1" if tf32 else "0"}),
                         "CPUExecutionProvider"]
            self.cuda = index
        elif device != "cpu":
            raise ValueError(f"OnnxModel: device is cpu, cuda or cuda:N, got {device!r}")
        # On a GPU, two requests at once in a worker: onnxruntime's run is thread-safe and releases the GIL, so one
        # request's Python work (reading, stacking, answering) overlaps the other's model run in one process and
        # one CUDA context (a second replica is a second process, whose GPU work the driver time-slices with the
        # first's). On the CPU one: a run already takes every core.
        if concurrency is not None and (not isinstance(concurrency, int) or not 1 <= concurrency <= 8):
            raise ValueError(f"OnnxModel: concurrency is an integer from 1 to 8, got {concurrency!r}")
        self.concurrent_requests = concurrency or (2 if self.cuda is not None else 1)
        self.ort = onnxruntime
        self.session = onnxruntime.InferenceSession(path, sess_options=options, providers=providers)
        if self.cuda is not None and self.session.get_providers()[0] != "CUDAExecutionProvider":
            # onnxruntime falls back to the CPU when the CUDA provider cannot load (no cuDNN, no driver)
            raise RuntimeError(f"OnnxModel: device {device}, but onnxruntime could not start its CUDA execution "
                               f"provider (it runs on {', '.join(self.session.get_providers())}; its log says why)")
        self.input, self.output, self.batch_size = input, output, batch_size
        inputs = {i.name: i for i in self.session.get_inputs()}
        self.main = input_name or next(iter(inputs))
        if self.main not in inputs:
            raise ValueError(f"OnnxModel: the model has no input {self.main!r}; its inputs: {', '.join(inputs)}")
        self.main_type = TYPES.get(inputs[self.main].type, "float32")
        self.extra = {}
        for name, spec in inputs.items():
            if name == self.main:
                continue
            if name not in ("attention_mask", "token_type_ids"):
                raise ValueError(f"OnnxModel: the model's input {name!r} has no source (only {self.main!r} is read "
                                 "from documents; attention_mask and token_type_ids are made)")
            self.extra[name] = (1 if name == "attention_mask" else 0, TYPES.get(spec.type, "int64"))
        outputs = [o.name for o in self.session.get_outputs()]
        self.output_name = output_name or outputs[0]
        if self.output_name not in outputs:
            raise ValueError(f"OnnxModel: the model has no output {self.output_name!r}; its outputs: {', '.join(outputs)}")

    def run(self, stack):
        feeds = {self.main: stack.astype(self.main_type, copy=False)}
        for name, (value, dtype) in self.extra.items():
            feeds[name] = np.full(stack.shape, value, dtype=dtype)
        if self.cuda is None:
            (out,) = self.session.run([self.output_name], feeds)
        else:  # IOBinding: each input copied to the GPU once, the output left there until one copy back
            binding = self.session.io_binding()
            for name, array in feeds.items():
                binding.bind_ortvalue_input(name, self.ort.OrtValue.ortvalue_from_numpy(array, "cuda", self.cuda))
            binding.bind_output(self.output_name, "cuda", self.cuda)
            self.session.run_with_iobinding(binding)
            out = binding.copy_outputs_to_cpu()[0]
        if out.shape[0] != stack.shape[0]:
            raise ValueError(f"OnnxModel: output {self.output_name!r} has {out.shape[0]} rows for {stack.shape[0]} inputs")
        return out

    @flowline.requests
    def infer(self, docs, parameters, **kwargs):
        groups = {}
        for d in docs:
            value = getattr(d, self.input)
            if value is not None:
                array = np.asarray(value)
                groups.setdefault((array.shape, array.dtype.str), []).append((d, array))
        for members in groups.values():
            for start in range(0, len(members), self.batch_size):
                part = members[start:start + self.batch_size]
                out = self.run(np.stack([a for _, a in part]))
                for (d, _), row in zip(part, out):
                    setattr(d, self.output, np.ascontiguousarray(row, dtype=np.float32))
