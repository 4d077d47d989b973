// Package docs holds no code: its test reads README.md and docs/*.md and
// checks every flag they name against the binaries' real flag sets.
package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	logsapi "k8s.io/component-base/logs/api/v1"

	"ome.io/quota-manager/manager"
	"ome.io/quota-manager/quotactl"
	"ome.io/quota-manager/replay"
	"ome.io/quota-manager/webhook"
)

// foreign are the flags of other programs that the docs name, with the
// program. A name listed here may be ours too (--kubeconfig, --namespace);
// then the docs' prose may mean either, and only a flag table, which is
// always ours, has its default checked.
var foreign = map[string]string{
	"admission-control-config-file":        "kube-apiserver",
	"archive":                              "kubectl krew install",
	"bogus":                                "an example of a flag no command has",
	"bound-object-kind":                    "kubectl create token",
	"bound-object-name":                    "kubectl create token",
	"cascade":                              "kubectl delete",
	"create-namespace":                     "helm install",
	"demo":                                 "test/cmd/localcluster up",
	"dry-run":                              "kubectl apply",
	"duration":                             "kubectl create token",
	"embed-certs":                          "kubectl config set-credentials",
	"event-ttl":                            "kube-apiserver",
	"flatten":                              "kubectl config view",
	"for":                                  "kubectl wait",
	"format":                               "gcloud container clusters describe",
	"from-file":                            "kubectl create secret",
	"from-literal":                         "kubectl create secret",
	"help":                                 "every command",
	"kube-context":                         "helm",
	"kueue":                                "test/cmd/localcluster up",
	"location":                             "gcloud container clusters describe",
	"managed-serviceaccount":               "OCM's clusteradm",
	"manifest":                             "kubectl krew install",
	"minify":                               "kubectl config view",
	"name":                                 "aws eks describe-cluster",
	"no-headers":                           "kubectl get",
	"pdeathsig":                            "setpriv",
	"query":                                "aws eks describe-cluster",
	"raw":                                  "kubectl get",
	"request-timeout":                      "kube-apiserver",
	"reuse-values":                         "helm upgrade",
	"server-side":                          "kubectl apply",
	"service-account-max-token-expiration": "kube-apiserver",
	"set":                                  "helm install",
	"show-labels":                          "kubectl get",
	"subresource":                          "kubectl patch",
	"tail":                                 "kubectl logs",
	"timeout":                              "kubectl wait",
	"type":                                 "kubectl patch",
}

// ourFlags are the flags of ome-quota-manager (and its webhook, its
// logging, record and replay) and of kubectl-ome, each with every default
// it has under that name.
type ourFlags map[string][]*pflag.Flag

func (o ourFlags) add(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.ContainsFunc(o[f.Name], func(g *pflag.Flag) bool { return g.DefValue == f.DefValue }) {
			o[f.Name] = append(o[f.Name], f)
		}
	})
}

// managerFlags are ome-quota-manager's flags, put together as
// cmd/ome-quota-manager's run does.
func managerFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("ome-quota-manager", pflag.ContinueOnError)
	manager.DefaultOptions().AddFlags(fs)
	webhook.DefaultOptions().AddFlags(fs)
	logsapi.AddFlags(logsapi.NewLoggingConfiguration(), fs)
	return fs
}

// pluginFlags are kubectl-ome's flags, of every command.
func pluginFlags() []*pflag.FlagSet {
	var out []*pflag.FlagSet
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		out = append(out, c.Flags(), c.PersistentFlags())
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(quotactl.NewCommand(genericiooptions.NewTestIOStreamsDiscard()))
	return out
}

func collect() ourFlags {
	o := ourFlags{}
	o.add(managerFlags())
	o.add(replay.FlagSet())
	for _, fs := range pluginFlags() {
		o.add(fs)
	}
	return o
}

var (
	// mention is a flag named anywhere: --name, or a family --name-*.
	mention = regexp.MustCompile("(?:^|[\\s`(\\[=,;\"'])--([a-z][a-z0-9-]*[a-z0-9])(-\\*)?")
	// cellFlag is a flag in a table's first cell: `--name` or `-v`.
	cellFlag = regexp.MustCompile("`--?([a-z][a-z0-9-]*)`")
	// prose is a default given after a flag: "`--name` (default 5m, ...)",
	// "`--name` (75 s)", "(`--name`, 10 s)".
	prose = regexp.MustCompile("`--([a-z0-9-]+)`(?: \\(|, )([^)]*)\\)")
	// value is what prose may give as a default.
	value = regexp.MustCompile("^(`[^`]+`|[0-9][0-9.]*(?: ?(?:ms|s|min|m|h))?)$")
)

type doc struct{ name, text string }

func readDocs(t *testing.T) []doc {
	t.Helper()
	paths, err := filepath.Glob("*.md")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no docs beside the test: %v", err)
	}
	paths = append([]string{"../README.md"}, paths...)
	var out []doc
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, doc{strings.TrimPrefix(p, "../"), string(b)})
	}
	return out
}

// TestDocsFlagsExistWithTheirDefaults: every --flag that README.md and
// docs/*.md name is a flag of ome-quota-manager or kubectl-ome, or of a
// program listed in foreign; and every default the docs give, in a flag
// table's default column or in prose right after the flag, is the flag's
// real default.
func TestDocsFlagsExistWithTheirDefaults(t *testing.T) {
	ours, docs := collect(), readDocs(t)
	// The flag tables are the manager's: a name it shares with replay or
	// the plugin is checked against the manager's default there.
	mgr := ourFlags{}
	mgr.add(managerFlags())
	named := map[string]bool{}
	for _, d := range docs {
		for i, line := range strings.Split(d.text, "\n") {
			for _, m := range mention.FindAllStringSubmatch(line, -1) {
				name, family := m[1], m[2] != ""
				named[name] = true
				if _, ok := ours[name]; ok || foreign[name] != "" {
					continue
				}
				if family && slices.ContainsFunc(keys(ours), func(k string) bool { return strings.HasPrefix(k, name+"-") }) {
					continue
				}
				t.Errorf("%s:%d names --%s, which neither ome-quota-manager nor kubectl-ome has (another program's? list it in foreign)", d.name, i+1, name)
			}
		}
	}
	for name, prog := range foreign {
		if !named[name] {
			t.Errorf("foreign lists --%s (%s), which no doc names any more: drop it", name, prog)
		}
	}

	checked := 0
	for _, d := range docs {
		lines := strings.Split(d.text, "\n")
		defaultCol := -1
		for i, line := range lines {
			cells := tableCells(line)
			switch {
			case cells == nil:
				defaultCol = -1
				continue
			case strings.EqualFold(cells[0], "flag"):
				defaultCol = slices.IndexFunc(cells, func(c string) bool { return strings.EqualFold(c, "default") })
				continue
			case defaultCol < 0 || defaultCol >= len(cells):
				continue
			}
			var names []string
			for _, m := range cellFlag.FindAllStringSubmatch(cells[0], -1) {
				names = append(names, m[1])
			}
			defs := []string{cells[defaultCol]}
			if len(names) > 1 {
				defs = strings.Split(cells[defaultCol], ", ")
				if len(defs) != len(names) {
					t.Errorf("%s:%d: %d flags but %d defaults in %q", d.name, i+1, len(names), len(defs), cells[defaultCol])
					continue
				}
			}
			for j, name := range names {
				real := mgr[name]
				if real == nil {
					real = ours[name]
				}
				if msg := checkDefault(real, defs[j]); msg != "" {
					t.Errorf("%s:%d: the table gives --%s the default %q: %s", d.name, i+1, name, defs[j], msg)
				}
				checked++
			}
		}
		for i, line := range lines {
			if tableCells(line) != nil {
				continue
			}
			for _, m := range prose.FindAllStringSubmatch(line, -1) {
				name, given := m[1], strings.TrimSpace(m[2])
				if foreign[name] != "" || ours[name] == nil {
					continue
				}
				if rest, ok := strings.CutPrefix(given, "default "); ok {
					given, _, _ = strings.Cut(rest, ",")
				}
				if !value.MatchString(given) || strings.HasPrefix(given, "`-") {
					continue // not a default: "(chart: ...)", "(`NAME: SECRET` or ...)"
				}
				if msg := checkDefault(ours[name], given); msg != "" {
					t.Errorf("%s:%d: the text gives --%s the default %q: %s", d.name, i+1, name, given, msg)
				}
				checked++
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d documented defaults found: has a flag table's layout changed?", checked)
	}
	t.Logf("%d flags named, %d documented defaults checked", len(named), checked)
}

// TestHelpNamesOnlyRealFlags: a flag's help text that points to another
// flag points to one the same program has, or to another program's that
// foreign lists (the API server's --request-timeout).
func TestHelpNamesOnlyRealFlags(t *testing.T) {
	programs := map[string][]*pflag.FlagSet{
		"ome-quota-manager":        {managerFlags()},
		"ome-quota-manager replay": {replay.FlagSet()},
		"kubectl-ome":              pluginFlags(),
	}
	for prog, sets := range programs {
		has := map[string]bool{}
		for _, fs := range sets {
			fs.VisitAll(func(f *pflag.Flag) { has[f.Name] = true })
		}
		for _, fs := range sets {
			fs.VisitAll(func(f *pflag.Flag) {
				for _, m := range mention.FindAllStringSubmatch(" "+f.Usage, -1) {
					if !has[m[1]] && foreign[m[1]] == "" {
						t.Errorf("%s --%s: its help names --%s, which %s does not have", prog, f.Name, m[1], prog)
					}
				}
			})
		}
	}
}

// tableCells are the cells of a markdown table row, trimmed; nil for any
// other line.
func tableCells(line string) []string {
	if !strings.HasPrefix(line, "|") {
		return nil
	}
	parts := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// empty are the words the docs use for a default that is empty (set at
// start from elsewhere, or required).
var empty = map[string]bool{
	"none": true, "(required)": true, "in-cluster": true, `""`: true,
	"$POD_NAMESPACE": true, "hostname_random": true,
}

// checkDefault says how the documented default differs from each real
// one; "" when it matches one of them.
func checkDefault(real []*pflag.Flag, given string) string {
	if len(real) == 0 {
		return "no such flag"
	}
	doc := strings.Trim(given, "`")
	if i := strings.Index(doc, " ("); i > 0 {
		doc = strings.Trim(doc[:i], "`") // "`1073741824` (1 GiB)", "none (all)"
	}
	var got []string
	for _, f := range real {
		def := strings.Trim(f.DefValue, "[]")
		got = append(got, strconv.Quote(f.DefValue))
		switch {
		case empty[doc]:
			if def == "" {
				return ""
			}
		case f.Value.Type() == "duration":
			want, err1 := parseDuration(doc)
			have, err2 := time.ParseDuration(def)
			if err1 == nil && err2 == nil && want == have {
				return ""
			}
		case doc == def:
			return ""
		}
	}
	sort.Strings(got)
	return fmt.Sprintf("the real default is %s", strings.Join(got, " or "))
}

// parseDuration reads the docs' durations: 1m, 10 min, 75 s, 0s.
func parseDuration(s string) (time.Duration, error) {
	s = strings.ReplaceAll(strings.ReplaceAll(s, " ", ""), "min", "m")
	return time.ParseDuration(s)
}

func keys(m ourFlags) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
