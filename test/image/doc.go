// Package image builds the container image with `make image` (no Docker
// daemon) and reads the tarball back with the standard library: the OCI
// layout and Docker's manifest.json, the config (user, entrypoint,
// platform) and the single layer holding one static binary.
package image
