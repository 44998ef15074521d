"""The gateway's HTTP routers, one per concern; each takes its state through :mod:`services.gateway.deps`."""
