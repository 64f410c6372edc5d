"""The serving side: gRPC adapter, metrics, model reloading and the daemon's lifecycle."""
