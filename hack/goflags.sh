# Sourced by the Makefile's build targets and by hack/{test,tools,plugin}.sh:
# the Go flags every compile of this project and of its tools uses (no cgo,
# no local paths in binaries), so that one compile of each package serves the
# tools, go vet, the tests, the binaries the tests build, the plugin and the
# amd64 image: Go's build cache keys a compile by its flags.
export CGO_ENABLED=0
OME_GOFLAGS="-trimpath"
