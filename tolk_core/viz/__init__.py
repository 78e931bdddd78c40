"""`tolk viz`: run a program (or a built-in example) recording what the compiler did, write the HTML view,
serve it on 127.0.0.1 or photograph it with headless Chromium (docs/viz.md). The recording and the page are
the engine's (`engine/viz.py`, `engine/viz_page.py`)."""
