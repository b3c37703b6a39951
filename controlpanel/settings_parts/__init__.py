"""controlpanel.settings in parts, each a coherent group of settings it star-imports (each part
names what it gives in __all__)."""
