"""Serving formats: checkpoint -> ONNX (checked against PyTorch) -> TensorRT engine."""
