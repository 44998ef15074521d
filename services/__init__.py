"""Evidentia's services: one package each, the same layout in every one (app, handlers, core modules)."""
