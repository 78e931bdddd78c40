"""tolk-example-device: a worked out-of-tree Tolk plugin. Import-light: the entry point is `plugin`."""
