//! holdfast-server's integration tests over real HTTP (being written).
