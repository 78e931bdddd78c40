"""Rendering: the `Renderer` contract every renderer subclasses (renderer.py), the C-style base every C-family
dialect builds on (cstyle.py), the PYTHON reference renderer, and the public C-compile helper."""
