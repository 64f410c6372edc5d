"""Model versions on disk (store) and serving them (runtime, onnxruntime only)."""
