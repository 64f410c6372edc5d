"""Generated gRPC/protobuf code for the harp.v1 contract (see proto/)."""
