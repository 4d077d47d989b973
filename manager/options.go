package manager

import (
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/projector"
	"ome.io/quota-manager/store"
)

// Modes of the manager.
const (
	ModeWorkload   = "workload"
	ModeManagement = "management"
)

// Inventories of a management plane's members (--members-from).
const (
	MembersFromClusterProfiles = "clusterprofiles"
	MembersFromSecrets         = "secrets"
)

// maxCoverResources bounds the cover resources, defaults included.
const maxCoverResources = 16

// Options are the manager's flags.
type Options struct {
	Mode               string
	Kubeconfig         string
	EnrolledNamespaces []string
	CapacityResources  []string
	CoverResources     map[string]string
	HysteresisPercent  int
	ReportInterval     time.Duration
	ResyncInterval     time.Duration
	MaxTreeDepth       int
	MetricsAddr        string
	MetricsSecure      bool
	MetricsCertDir     string
	Profiling          bool
	HealthAddr         string
	ApplyWorkers       int
	KubeAPIQPS         float32
	KubeAPIBurst       int
	DRA                bool
	DRAConfig          string
	DRAConfigPoll      time.Duration
	// DRAKueueConfig is Kueue's configuration ConfigMap, namespace/name,
	// whose DRA mappings are compared with the manager's; "" compares none.
	DRAKueueConfig string

	LeaderElect        bool
	LeaseNamespace     string
	LeaseName          string
	LeaseDuration      time.Duration
	LeaseRenewDeadline time.Duration
	LeaseRetryPeriod   time.Duration
	Identity           string

	// EventLog is the folder of the recorded event log; empty records
	// nothing. EventLogMaxBytes and EventLogMaxAge bound its retention.
	EventLog         string
	EventLogMaxBytes int64
	EventLogMaxAge   time.Duration
	EventLogSync     string
	// EventLogPruneSiblings removes, at start and every hour, the event
	// logs beside EventLog that no process holds and that nothing was
	// written to for EventLogMaxAge: the folders of pods gone from a
	// shared volume.
	EventLogPruneSiblings bool

	// Record runs informers only, to record an event log: no writes, no
	// Lease, no root (the record subcommand).
	Record bool

	// MembersFrom is where a management plane's inventory of member
	// clusters lives (--members-from): MembersFromClusterProfiles or
	// MembersFromSecrets.
	MembersFrom string
	// ClusterProfileNamespace, ClusterProfileSelector and
	// ClusterProfileProviders say which ClusterProfiles are the members
	// and the credential providers file through which the plane reaches
	// them (--clusterprofile-*).
	ClusterProfileNamespace string
	ClusterProfileSelector  string
	ClusterProfileProviders string
	// MembersConfigMap is the ConfigMap, in MembersNamespace (the pod's
	// when empty), that lists each member and the Secret of its kubeconfig
	// (--members-configmap, --members-namespace).
	MembersConfigMap string
	MembersNamespace string
	// MembersAllowInsecureKubeconfigs accepts member kubeconfigs whose
	// server the plane cannot verify (insecure-skip-tls-verify, or a plain
	// http server): for test clusters only
	// (--members-allow-insecure-kubeconfigs).
	MembersAllowInsecureKubeconfigs bool
	// MemberGrace is how long a management plane waits for a member that
	// never reported before it splits Proportional budgets without it
	// (--member-grace).
	MemberGrace time.Duration
	// Origin is the plane's name on the copies it writes to its members
	// (the ome.io/quota-origin label, --origin).
	Origin string

	// Parsed forms, filled by Validate. cover holds only the resources
	// given, without the defaults.
	cover    map[string]resource.Quantity
	draData  []byte
	mappings []events.DeviceClassMapping
}

// DefaultOptions are the flags' defaults.
func DefaultOptions() *Options {
	return &Options{
		CapacityResources:  events.DefaultMeasuredResources(),
		CoverResources:     map[string]string{},
		HysteresisPercent:  10,
		ReportInterval:     time.Minute,
		ResyncInterval:     10 * time.Minute,
		MaxTreeDepth:       events.DefaultMaxTreeDepth,
		MetricsAddr:        ":8080",
		MetricsSecure:      false,
		HealthAddr:         ":8081",
		ApplyWorkers:       16,
		KubeAPIQPS:         100,
		KubeAPIBurst:       200,
		DRA:                true,
		DRAConfigPoll:      10 * time.Second,
		DRAKueueConfig:     "kueue-system/kueue-manager-config",
		LeaderElect:        true,
		LeaseName:          "ome-quota-manager",
		LeaseDuration:      15 * time.Second,
		LeaseRenewDeadline: 10 * time.Second,
		LeaseRetryPeriod:   2 * time.Second,
		EventLogMaxBytes:   store.DefaultMaxBytes,
		EventLogSync:       string(store.SyncInterval),
		MembersConfigMap:   "ome-quota-manager-members",
		Origin:             "ome-quota-manager",
		MemberGrace:        5 * time.Minute,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Mode, "mode", o.Mode, `required: "workload" (turn this cluster's tree into Kueue objects) or "management" (split a fleet tree among the member clusters that --members-from lists and write each its copies)`)
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "path to a kubeconfig; empty means in-cluster")
	fs.StringSliceVar(&o.EnrolledNamespaces, "enrolled-namespaces", o.EnrolledNamespaces, "namespaces that get a LocalQueue per team; while empty nothing is written to Kueue")
	fs.StringSliceVar(&o.CapacityResources, "capacity-resources", o.CapacityResources, "resources measured as accelerators")
	fs.StringToStringVar(&o.CoverResources, "cover-resources", o.CoverResources, "extra resources every ClusterQueue covers, with their ceilings, e.g. rdma/hca_shared_devices_a=1M (cpu, memory and ephemeral-storage are always covered)")
	fs.IntVar(&o.HysteresisPercent, "capacity-hysteresis-percent", o.HysteresisPercent, "how far, in percent of the high-water mark, installed capacity must fall to lower the mark; 0 follows installed")
	fs.DurationVar(&o.ReportInterval, "capacity-report-interval", o.ReportInterval, "rewrite root's observedAt stamps when they are this old; 0s turns the refresh off")
	fs.DurationVar(&o.ResyncInterval, "resync-interval", o.ResyncInterval, "measure at least this often, and compare every node with its Kueue objects at least this often even when nothing it reads changed")
	fs.IntVar(&o.MaxTreeDepth, "max-tree-depth", o.MaxTreeDepth, "deepest a node may sit below root, in edges; 0 turns the check off")
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, "address of the Prometheus /metrics endpoint; 0 turns it off")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", o.MetricsSecure, "serve /metrics over HTTPS, to scrapers whose bearer token the API server authenticates (TokenReview) and allows to get the non-resource URL /metrics (SubjectAccessReview); false (the default) serves plain HTTP to anyone who reaches the port")
	fs.StringVar(&o.MetricsCertDir, "metrics-cert-dir", o.MetricsCertDir, "folder holding tls.crt and tls.key for the metrics endpoint, reloaded when they change; empty means a self-signed certificate made in memory at start")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "serve Go's profiles (/debug/pprof/) on the metrics endpoint, behind its authentication when --metrics-secure; off by default")
	fs.StringVar(&o.HealthAddr, "health-probe-bind-address", o.HealthAddr, "address of /healthz and /readyz; 0 turns them off")
	fs.IntVar(&o.ApplyWorkers, "apply-workers", o.ApplyWorkers, "nodes compared and written at once, each one write at a time (two more workers take only urgent changes)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "client-side request rate to the API server (raise it, with --kube-api-burst and --apply-workers, for a first materialization of thousands of objects: see docs/performance.md)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "client-side request burst to the API server")
	fs.BoolVar(&o.DRA, "dra", o.DRA, "measure DRA devices from DeviceClasses and ResourceSlices (resource.k8s.io/v1) when the API server serves them")
	fs.StringVar(&o.DRAConfig, "dra-config", o.DRAConfig, "file with the DRA deviceClassMappings (logical resource name -> DeviceClass names, optional Counter sources); Kueue's own Configuration file is accepted as is")
	fs.StringVar(&o.DRAKueueConfig, "dra-kueue-config", o.DRAKueueConfig, "Kueue's configuration ConfigMap (namespace/name), read every --dra-config-poll-interval (at least 1s) to report DRA deviceClassMappings that differ from the quota manager's (a metric, an Event on root, a log line); \"\" compares nothing")
	fs.DurationVar(&o.DRAConfigPoll, "dra-config-poll-interval", o.DRAConfigPoll, "how often --dra-config is read again; a change is applied at once; 0s reads it at start only")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "hold a Lease so that only one replica writes")
	fs.StringVar(&o.LeaseNamespace, "leader-election-namespace", o.LeaseNamespace, "namespace of the Lease; empty means the pod's namespace ($POD_NAMESPACE)")
	fs.StringVar(&o.LeaseName, "leader-election-id", o.LeaseName, "name of the Lease")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "how long a lease holds without renewal")
	fs.DurationVar(&o.LeaseRenewDeadline, "leader-election-renew-deadline", o.LeaseRenewDeadline, "how long the leader keeps retrying to renew before it gives up")
	fs.DurationVar(&o.LeaseRetryPeriod, "leader-election-retry-period", o.LeaseRetryPeriod, "how often candidates try to acquire or renew")
	fs.StringVar(&o.Identity, "leader-election-identity", o.Identity, "this replica's name in the Lease; empty means the hostname plus a random suffix, unique per process")
	fs.StringVar(&o.EventLog, "event-log", o.EventLog, "folder of the recorded event log, for 'ome-quota-manager replay'; empty records nothing")
	fs.Int64Var(&o.EventLogMaxBytes, "event-log-max-bytes", o.EventLogMaxBytes, "remove the oldest segments of the event log beyond this many bytes, of which an eighth holds the webhook's verdicts apart from the rest (a sixteenth for authenticated reviews, a sixteenth for the others); negative keeps everything")
	fs.DurationVar(&o.EventLogMaxAge, "event-log-max-age", o.EventLogMaxAge, "remove segments of the event log last written longer ago than this; 0 keeps them")
	fs.BoolVar(&o.EventLogPruneSiblings, "event-log-prune-siblings", o.EventLogPruneSiblings, "remove the event logs beside --event-log (the other folders of its parent) that no process holds and that were last written longer ago than --event-log-max-age: the folders of pods gone from a shared volume")
	fs.StringVar(&o.MembersFrom, "members-from", o.MembersFrom, `management mode, required: where the member clusters are listed: "clusterprofiles" (the ClusterProfiles of --clusterprofile-namespace that --clusterprofile-selector picks, reached through --clusterprofile-provider-file) or "secrets" (the entries of --members-configmap, each naming a kubeconfig Secret)`)
	fs.StringVar(&o.ClusterProfileNamespace, "clusterprofile-namespace", o.ClusterProfileNamespace, "management mode: the namespace of the fleet's ClusterProfiles (multicluster.x-k8s.io/v1alpha1); empty means the pod's namespace ($POD_NAMESPACE)")
	fs.StringVar(&o.ClusterProfileSelector, "clusterprofile-selector", o.ClusterProfileSelector, "management mode: a label selector that picks the member ClusterProfiles of the namespace; empty picks all")
	fs.StringVar(&o.ClusterProfileProviders, "clusterprofile-provider-file", o.ClusterProfileProviders, "management mode: the credential providers file (JSON, as Kueue's MultiKueue reads it: providers, each a name and an execConfig) through which the plane reaches each ClusterProfile's access provider")
	fs.StringVar(&o.MembersConfigMap, "members-configmap", o.MembersConfigMap, "management mode with --members-from=secrets: the ConfigMap whose entries list the members, each NAME: SECRET or SECRET/KEY (a kubeconfig Secret of the same namespace; key kubeconfig by default)")
	fs.StringVar(&o.MembersNamespace, "members-namespace", o.MembersNamespace, "management mode with --members-from=secrets: the namespace of --members-configmap and of the Secrets; empty means the pod's namespace ($POD_NAMESPACE)")
	fs.BoolVar(&o.MembersAllowInsecureKubeconfigs, "members-allow-insecure-kubeconfigs", o.MembersAllowInsecureKubeconfigs, "management mode with --members-from=secrets, for test clusters only: accept member kubeconfigs that set insecure-skip-tls-verify or reach a plain http server, whose identity the plane cannot check; file paths, tokenFile, exec and auth-provider stay refused")
	fs.DurationVar(&o.MemberGrace, "member-grace", o.MemberGrace, "management mode: how long a member that has never reported may hold up the fleet's Proportional splits; after it, they are split among the members that reported, and it rejoins them when it reports (its last known copies still count meanwhile); 0 waits for ever")
	fs.StringVar(&o.Origin, "origin", o.Origin, "management mode: the plane's name on the copies it writes to its members (label ome.io/quota-origin); a member's copies of another origin are never touched")
	fs.StringVar(&o.EventLogSync, "event-log-sync", o.EventLogSync, `when the event log is flushed to disk: "interval" (every second), "always" (every event) or "never" (left to the OS)`)
}

// Validate checks the options and fills the parsed forms. Each error names
// the flag.
func (o *Options) Validate() error {
	switch o.Mode {
	case ModeWorkload:
		if o.MembersFrom != "" {
			return fmt.Errorf("--members-from is set but --mode=workload: only a management plane has member clusters; drop --members-from or run with --mode=management")
		}
		if o.MembersAllowInsecureKubeconfigs {
			return fmt.Errorf("--members-allow-insecure-kubeconfigs is set but --mode=workload: only a management plane reads member kubeconfigs; drop it")
		}
	case ModeManagement:
		if err := o.validatePlane(); err != nil {
			return err
		}
	case "":
		return fmt.Errorf(`--mode is required: "workload" or "management"`)
	default:
		return fmt.Errorf(`--mode must be "workload" or "management", got %q`, o.Mode)
	}
	for _, ns := range o.EnrolledNamespaces {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--enrolled-namespaces: %q is not a namespace name: %s", ns, strings.Join(errs, "; "))
		}
	}
	if len(o.CapacityResources) == 0 {
		return fmt.Errorf("--capacity-resources must name at least one resource")
	}
	for _, r := range o.CapacityResources {
		if errs := validation.IsQualifiedName(r); len(errs) > 0 {
			return fmt.Errorf("--capacity-resources: %q is not a resource name: %s", r, strings.Join(errs, "; "))
		}
	}
	o.cover = map[string]resource.Quantity{}
	keys := make([]string, 0, len(o.CoverResources))
	for k := range o.CoverResources {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("--cover-resources: %q is not a resource name: %s", k, strings.Join(errs, "; "))
		}
		q, err := resource.ParseQuantity(o.CoverResources[k])
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("--cover-resources: the ceiling of %s must be a positive quantity such as 1M, got %q", k, o.CoverResources[k])
		}
		o.cover[k] = q
	}
	// A team's ClusterQueue has one resource group covering its budgeted
	// resources (at most 16, the CRD's limit on budgets) and the cover
	// resources, on each budgeted flavor (at most 16). Kueue v0.17 refuses
	// a group of more than 512 flavor-resource combinations, so at most 16
	// cover resources keep 16 x (16 + 16) within it.
	if n := len(projector.CoverResources(o.cover)); n > maxCoverResources {
		return fmt.Errorf("--cover-resources: %d cover resources with cpu, memory and ephemeral-storage, but at most %d fit: Kueue refuses a ClusterQueue resource group of more than 512 flavor-resource combinations, and a team may budget 16 resources on 16 flavors",
			n, maxCoverResources)
	}
	if o.HysteresisPercent < 0 || o.HysteresisPercent > 100 {
		return fmt.Errorf("--capacity-hysteresis-percent must be between 0 and 100, got %d", o.HysteresisPercent)
	}
	if o.ReportInterval < 0 {
		return fmt.Errorf("--capacity-report-interval must not be negative, got %s", o.ReportInterval)
	}
	if o.ResyncInterval <= 0 {
		return fmt.Errorf("--resync-interval must be positive, got %s", o.ResyncInterval)
	}
	if o.MaxTreeDepth < 0 {
		return fmt.Errorf("--max-tree-depth must be 0 (no limit) or more, got %d", o.MaxTreeDepth)
	}
	if o.MetricsCertDir != "" && !o.MetricsSecure {
		return fmt.Errorf("--metrics-cert-dir=%s is set but --metrics-secure=false serves plain HTTP: drop one of them", o.MetricsCertDir)
	}
	if o.ApplyWorkers < 1 {
		return fmt.Errorf("--apply-workers must be at least 1, got %d", o.ApplyWorkers)
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		return fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive")
	}
	if o.EventLog != "" {
		if _, err := o.StoreOptions(); err != nil {
			return fmt.Errorf("--event-log: %w", err)
		}
	}
	if o.EventLogPruneSiblings && (o.EventLog == "" || o.EventLogMaxAge <= 0) {
		return fmt.Errorf("--event-log-prune-siblings removes the logs beside --event-log last written longer ago than --event-log-max-age: it needs both set")
	}
	if o.DRAConfig != "" {
		if !o.DRA {
			return fmt.Errorf("--dra-config is set but --dra=false: drop one of them")
		}
		if o.DRAConfigPoll < 0 {
			return fmt.Errorf("--dra-config-poll-interval must not be negative, got %s", o.DRAConfigPoll)
		}
		data, ms, err := readDRAConfig(o.DRAConfig)
		if err != nil {
			return err
		}
		o.draData, o.mappings = data, ms
	}
	if o.DRAKueueConfig != "" {
		ns, name, ok := strings.Cut(o.DRAKueueConfig, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("--dra-kueue-config=%q: write Kueue's configuration ConfigMap as namespace/name (kueue-system/kueue-manager-config), or \"\" to compare nothing", o.DRAKueueConfig)
		}
	}
	if o.LeaderElect {
		if o.LeaseDuration <= o.LeaseRenewDeadline || o.LeaseRenewDeadline <= o.LeaseRetryPeriod || o.LeaseRetryPeriod <= 0 {
			return fmt.Errorf("--leader-election-lease-duration (%s) must exceed --leader-election-renew-deadline (%s), which must exceed --leader-election-retry-period (%s)",
				o.LeaseDuration, o.LeaseRenewDeadline, o.LeaseRetryPeriod)
		}
	}
	return nil
}

// validatePlane checks the options of management mode: at least one
// member, each named as a Kubernetes object and reached by a kubeconfig
// file; an origin that a label can hold; nothing enrolled, since the plane
// writes no Kueue objects of its own.
func (o *Options) validatePlane() error {
	switch o.MembersFrom {
	case MembersFromClusterProfiles:
		if o.ClusterProfileProviders == "" {
			return fmt.Errorf("--members-from=clusterprofiles needs --clusterprofile-provider-file: the credential providers through which the plane reaches each ClusterProfile")
		}
		if _, err := labels.Parse(o.ClusterProfileSelector); err != nil {
			return fmt.Errorf("--clusterprofile-selector=%q is not a label selector: %w", o.ClusterProfileSelector, err)
		}
		if o.MembersAllowInsecureKubeconfigs {
			return fmt.Errorf("--members-allow-insecure-kubeconfigs is set but --members-from=clusterprofiles reads no kubeconfig: drop it (a profile's access provider gives its server and CA)")
		}
	case MembersFromSecrets:
		if errs := validation.IsDNS1123Subdomain(o.MembersConfigMap); len(errs) > 0 {
			return fmt.Errorf("--members-configmap=%q is not a ConfigMap name: %s", o.MembersConfigMap, strings.Join(errs, "; "))
		}
	case "":
		return fmt.Errorf(`--mode=management needs --members-from: "clusterprofiles" (the fleet's ClusterProfiles) or "secrets" (a ConfigMap listing kubeconfig Secrets)`)
	default:
		return fmt.Errorf(`--members-from must be "clusterprofiles" or "secrets", got %q`, o.MembersFrom)
	}
	if errs := validation.IsValidLabelValue(o.Origin); o.Origin == "" || len(errs) > 0 {
		return fmt.Errorf("--origin=%q must be a non-empty label value: %s", o.Origin, strings.Join(errs, "; "))
	}
	if len(o.EnrolledNamespaces) > 0 {
		return fmt.Errorf("--enrolled-namespaces is set but --mode=management writes no Kueue objects on its own cluster (each member's manager does, in its own enrolled namespaces): drop it")
	}
	return nil
}

// LeaderIdentity is this replica's name in the Lease: --leader-election-identity,
// or the hostname, an underscore and a random UUID, as Kubernetes' own
// controllers do. Two processes on one host (or two pods with one
// hostname) must never hold the Lease as the same holder, or both lead.
func (o *Options) LeaderIdentity() (string, error) {
	if o.Identity != "" {
		return o.Identity, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --leader-election-identity and no hostname to build one from: %w", err)
	}
	return h + "_" + string(uuid.NewUUID()), nil
}

// TickInterval is how often the timer measures: the smaller of the resync
// and the report interval (the resync alone when reporting is off).
func (o *Options) TickInterval() time.Duration {
	tick := o.ResyncInterval
	if o.ReportInterval > 0 && o.ReportInterval < tick {
		tick = o.ReportInterval
	}
	if o.Mode == ModeManagement && o.MemberGrace > 0 {
		// The ticks tell a plane when a member's grace ends: a tenth of it
		// late at most.
		tick = min(tick, max(o.MemberGrace/10, time.Second))
	}
	return tick
}

// EventsConfig is the part of the options the state depends on.
func (o *Options) EventsConfig() events.Config {
	c := events.Config{
		MaxTreeDepth:        o.MaxTreeDepth,
		HysteresisPercent:   o.HysteresisPercent,
		MeasuredResources:   o.CapacityResources,
		EnrolledNamespaces:  o.EnrolledNamespaces,
		DeviceClassMappings: o.mappings,
	}
	if o.Mode == ModeManagement {
		c.Mode, c.Origin = events.ModeManagement, o.Origin
		c.MemberGrace.Duration = o.MemberGrace
	}
	if len(o.cover) > 0 {
		c.CoverResources = maps.Clone(o.cover)
	}
	c.ReportInterval.Duration = o.ReportInterval
	return c.Normalized()
}

// StoreOptions are the event log's bounds, checked: what
// --event-log-max-bytes allows, less the share of the log of verdicts
// (VerdictStoreOptions).
func (o *Options) StoreOptions() (store.Options, error) {
	so := o.logOptions()
	if so.MaxBytes > 0 {
		so.MaxBytes -= 2 * verdictShare(so.MaxBytes)
	}
	if err := so.Check(); err != nil {
		return so, err
	}
	_, err := o.VerdictStoreOptions()
	return so, err
}

// VerdictStoreOptions are the bounds of each log of the webhook's
// verdicts (store.VerdictsDir and store.AuthenticatedVerdictsDir inside
// --event-log): a sixteenth of --event-log-max-bytes each, an eighth
// together, and the same age bound and sync policy.
func (o *Options) VerdictStoreOptions() (store.Options, error) {
	so := o.logOptions()
	if so.MaxBytes > 0 {
		so.MaxBytes = verdictShare(so.MaxBytes)
	}
	if err := so.Check(); err != nil {
		return so, fmt.Errorf("each log of the webhook's verdicts, a sixteenth of --event-log-max-bytes: %w; raise --event-log-max-bytes", err)
	}
	return so, nil
}

// logOptions are the event log flags' bounds, whole.
func (o *Options) logOptions() store.Options {
	return store.Options{MaxBytes: o.EventLogMaxBytes, MaxAge: o.EventLogMaxAge, Sync: store.SyncPolicy(o.EventLogSync)}
}

// verdictShare is the part of a log's byte bound kept for each of the
// two logs of verdicts (unauthenticated and authenticated).
func verdictShare(maxBytes int64) int64 { return maxBytes / 16 }
