"""The live platform: store, control loop, executors, API. Drives the same decide() as the simulator."""
