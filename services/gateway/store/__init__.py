"""The gateway's SQL, one module per concern (conversations, workflow cache, documents)."""
