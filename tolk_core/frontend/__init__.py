"""The user-facing front end: Tensor and its ops."""
