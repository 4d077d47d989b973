# Sourced by the Makefile's build targets and by hack/{test,tools,plugin}.sh:
# the Go flags every compile of this project and of its tools uses, so that
# one compile of each package serves the tools, go vet, the tests, the
# binaries the tests build, the plugin and the amd64 image (Go's build cache
# keys a compile by its flags).
#
# -trimpath: no local paths in binaries. -dwarf=false: the shipped binaries
# are stripped (-ldflags "-s -w") and so are the tools, so their debug
# information is thrown away at link; not making it saves about a sixth of
# the compile time on a cold cache. Test binaries have none either: stack
# traces and panics still name files and lines; a debugger needs a build of
# its own (go test -c without these flags).
export CGO_ENABLED=0
OME_GOFLAGS="-trimpath -gcflags=all=-dwarf=false"
