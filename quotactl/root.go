package quotactl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/cli-runtime/pkg/printers"

	"ome.io/quota-manager/events"
)

// Exit codes.
const (
	ExitClean      = 0
	ExitError      = 1 // a usage or API error
	ExitViolations = 2 // validate found violations
	ExitImpact     = 3 // plan: admissible, but admitted work is left above budget or open to preemption
)

// exitError carries an exit code up through cobra; its message, when not
// empty, is printed as kubectl prints errors.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// violationsFound is validate's exit 2: the report is already printed.
var violationsFound = &exitError{code: ExitViolations}

// impactFound is plan's exit 3: the report is already printed.
var impactFound = &exitError{code: ExitImpact}

// options are what every command shares.
type options struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
	// now is the clock for ages; tests fix it.
	now func() time.Time
	// color forces colour on or off; nil decides from the terminal and
	// NO_COLOR.
	color *bool
	// maxDepth and hysteresis are the manager's settings that the rules
	// read, which the plugin cannot read from the cluster.
	maxDepth   int
	hysteresis int
}

// coreConfig is the core's configuration with the manager's settings as
// the flags give them.
func (o *options) coreConfig(c *cobra.Command) (events.Config, error) {
	cfg := events.DefaultConfig()
	cfg.MaxTreeDepth, cfg.HysteresisPercent = o.maxDepth, o.hysteresis
	if err := cfg.Validate(); err != nil {
		return cfg, usageError(c, "%s", strings.ReplaceAll(err.Error(), "fix --", "fix kubectl ome's --"))
	}
	return cfg, nil
}

// NewCommand returns `kubectl ome`, with its quota subcommands.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams, config: genericclioptions.NewConfigFlags(true), now: time.Now}
	return o.command()
}

func (o *options) command() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-ome",
		Short: "Inspect and check OME's accelerator quota tree",
		Long: "kubectl ome works with OME's AcceleratorQuota tree: the budgets that ome-quota-manager\n" +
			"turns into Kueue queues. It only reads the cluster, but for quota release and quota forget.",
		Example:       "  # Print the quota tree\n  kubectl ome quota tree",
		SilenceErrors: true,
		SilenceUsage:  true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl ome"},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	o.config.AddFlags(root.PersistentFlags())
	quota := &cobra.Command{
		Use:   "quota",
		Short: "Print, explain and check the AcceleratorQuota tree",
		Long: "quota prints the AcceleratorQuota tree (tree), explains one node's state (status), checks\n" +
			"a change against the quota manager's rule book before you apply it (validate), shows what it\n" +
			"does to the Workloads Kueue runs (plan), and, on a member cluster, deletes the copies of a\n" +
			"management plane that can no longer do it (release). On a management plane, it lists the\n" +
			"member clusters (members) and declares one gone (forget).",
		Example: `  # The whole tree, with budgets, usage, states and root's capacity
  kubectl ome quota tree

  # Why is team-beta not Ready?
  kubectl ome quota status team-beta

  # Would the webhook accept this change, and does it fit the measured capacity?
  kubectl ome quota validate -f quota-tree.yaml

  # What if gpu-node-1 and gpu-node-2 were retired?
  kubectl ome quota validate --without-nodes gpu-node-1,gpu-node-2

  # Whose running Workloads would this change leave above budget, or open to reclaim?
  kubectl ome quota plan -f quota-tree.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	quota.PersistentFlags().IntVar(&o.maxDepth, "max-tree-depth", events.DefaultMaxTreeDepth,
		"The quota manager's --max-tree-depth, which the rules read; 0 turns the check off.")
	quota.PersistentFlags().IntVar(&o.hysteresis, "capacity-hysteresis-percent", events.DefaultHysteresisPercent,
		"The quota manager's --capacity-hysteresis-percent, by which marks move.")
	quota.AddCommand(o.treeCommand(), o.statusCommand(), o.validateCommand(), o.planCommand(), o.releaseCommand(), o.membersCommand(), o.forgetCommand())
	root.AddCommand(quota)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: ExitError, err: fmt.Errorf("%w\nSee '%s --help' for usage.", err, commandPath(c))}
	})
	for _, c := range []*cobra.Command{root, quota} {
		c.SetFlagErrorFunc(root.FlagErrorFunc())
	}
	return root
}

// commandPath is the command as the user types it: "kubectl ome quota tree".
func commandPath(c *cobra.Command) string {
	return strings.Replace(c.CommandPath(), "kubectl-ome", "kubectl ome", 1)
}

// Run runs kubectl-ome with args and returns the exit code, printing
// errors on streams.ErrOut the way kubectl does.
func Run(args []string, streams genericiooptions.IOStreams) int {
	return run(NewCommand(streams), args, streams)
}

func run(cmd *cobra.Command, args []string, streams genericiooptions.IOStreams) int {
	cmd.SetArgs(args)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	err := cmd.Execute()
	if err == nil {
		return ExitClean
	}
	code := ExitError
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	if msg := errorText(err); msg != "" {
		fmt.Fprintln(streams.ErrOut, msg)
	}
	return code
}

// errorText is an error as kubectl prints it: "Error from server
// (NotFound): ..." for an API error, else "error: ...".
func errorText(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		return fmt.Sprintf("Error from server (%s): %s", st.Reason, st.Message)
	}
	if err.Error() == "" {
		return ""
	}
	return "error: " + err.Error()
}

// usageError is a usage error, exit 1, with the usage hint.
func usageError(c *cobra.Command, format string, args ...any) error {
	return &exitError{code: ExitError, err: fmt.Errorf(format+"\nSee '%s --help' for usage.", append(args, commandPath(c))...)}
}

// addOutputFlag adds -o json|yaml.
func addOutputFlag(fs *pflag.FlagSet, out *string) {
	fs.StringVarP(out, "output", "o", "", "Output format: json or yaml, a versioned report ("+ReportGroupVersion.String()+"). Empty prints text.")
}

// checkOutput refuses an -o format other than json and yaml, before any
// request is made.
func checkOutput(c *cobra.Command, format string) error {
	switch format {
	case "", "json", "yaml":
		return nil
	}
	return usageError(c, "unable to match a printer suitable for the output format %q, allowed formats are: json,yaml", format)
}

// printReport prints obj as -o asks; ok is false for text output.
func printReport(c *cobra.Command, format string, obj runtime.Object, w io.Writer) (bool, error) {
	switch format {
	case "":
		return false, nil
	case "json":
		return true, (&printers.JSONPrinter{}).PrintObj(obj, w)
	case "yaml":
		return true, (&printers.YAMLPrinter{}).PrintObj(obj, w)
	}
	return true, checkOutput(c, format)
}

// colorOn reports whether to colour w: only a terminal, and not when
// NO_COLOR is set (to anything).
func (o *options) colorOn(w io.Writer) bool {
	if o.color != nil {
		return *o.color
	}
	if _, set := os.LookupEnv("NO_COLOR"); set {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// palette colours text, or leaves it when colour is off.
type palette bool

func (p palette) wrap(code, s string) string {
	if !p || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (p palette) good(s string) string { return p.wrap("32", s) }
func (p palette) bad(s string) string  { return p.wrap("31", s) }
func (p palette) warn(s string) string { return p.wrap("33", s) }
func (p palette) bold(s string) string { return p.wrap("1", s) }

// clients builds the API clients from the kubeconfig flags.
func (o *options) clients() (*clients, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return newClients(cfg)
}

// age is a duration the way kubectl prints ages: 45s, 3m, 2h, 4d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
