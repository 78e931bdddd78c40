"""Plugin system: hookspecs, entry-point loader, registry, device resolution."""
