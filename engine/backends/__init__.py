"""The Evaluator interface and the runtimes behind it: PyTorch, onnxruntime, TensorRT, a shared server."""
