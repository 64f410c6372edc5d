"""Transport-neutral core: request -> features -> model -> decision. Imports neither grpc nor Slurm tools."""
