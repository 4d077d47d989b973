# Sourced by the Makefile's build targets and by hack/{test,tools,plugin}.sh:
# the Go flags every compile of this project and of its tools uses, so that
# one compile of each package serves the tools, go vet, the tests, the
# binaries the tests build, the plugin and the images: Go's build cache keys
# a compile by its flags.
#   - no cgo, and no local paths in binaries (-trimpath);
#   - no DWARF (-dwarf=false): nothing here is run under a debugger, stack
#     traces and profiles read the pcln table, which stays, and the images
#     and tools are linked with -s -w, which dropped DWARF anyway. Without
#     it the build cache is a sixth smaller and a cold compile a little
#     faster (docs/performance.md). `dlv test` compiles with its own flags
#     for a debugging session.
export CGO_ENABLED=0
OME_GOFLAGS="-trimpath -gcflags=all=-dwarf=false"
