package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/webhook"
)

// TestDocsNameEveryFlag reads the flag tables of docs/ (rows whose first
// cell names flags): every flag of the manager and its webhook has a row, and
// every flag a row names exists, so the docs cannot keep a flag that is
// gone nor miss a new one.
func TestDocsNameEveryFlag(t *testing.T) {
	fs := pflag.NewFlagSet("ome-quota-manager", pflag.ContinueOnError)
	manager.DefaultOptions().AddFlags(fs)
	webhook.DefaultOptions().AddFlags(fs)
	var flags []string
	fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
	// Kubernetes' logging options may be named too; they are documented
	// where they come from.
	logs := pflag.NewFlagSet("logs", pflag.ContinueOnError)
	logsapi.AddFlags(logsapi.NewLoggingConfiguration(), logs)
	known := slices.Clone(flags)
	logs.VisitAll(func(f *pflag.Flag) { known = append(known, f.Name) })

	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	row, flag := regexp.MustCompile("^\\| (`--[^|]*)\\|"), regexp.MustCompile("`--([a-z0-9-]+)`")
	documented := map[string]string{}
	for _, path := range docs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if m := row.FindStringSubmatch(line); m != nil {
				for _, f := range flag.FindAllStringSubmatch(m[1], -1) {
					documented[f[1]] = filepath.Base(path)
				}
			}
		}
	}
	for _, f := range flags {
		if _, ok := documented[f]; !ok {
			t.Errorf("--%s has no row in a flag table of docs/", f)
		}
	}
	for f, doc := range documented {
		if !slices.Contains(known, f) {
			t.Errorf("%s documents --%s, which the manager does not have", doc, f)
		}
	}
}
