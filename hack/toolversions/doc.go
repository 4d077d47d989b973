// Package toolversions keeps the tools module (tools/kube: kube-apiserver,
// kubectl, Kueue, helm, prometheus and promtool) and the project on the same
// version of every module both compile, so that a cold `make test` compiles
// each shared package once: the tools build fills the Go build cache, and the
// project's vet and tests find the Kubernetes, Kueue and helm packages there.
// Its test fails, naming the module and the command that fixes it, when a
// version change in either go.mod breaks that.
package toolversions
