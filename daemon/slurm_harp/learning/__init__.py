"""Training: accounting records -> validated quantile models exported to ONNX (needs the train extra)."""
