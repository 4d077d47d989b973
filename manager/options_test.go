package manager

import (
	"os"
	"strings"
	"testing"

	"ome.io/quota-manager/test/flagtest"
)

func TestValidateNamesTheFlag(t *testing.T) {
	cases := map[string]struct {
		args []string
		want string // "" means valid
	}{
		"valid":                {[]string{"--mode=workload"}, ""},
		"mode missing":         {nil, "--mode is required"},
		"mode unknown":         {[]string{"--mode=fleet"}, `--mode must be "workload" or "management", got "fleet"`},
		"plane, no inventory":  {[]string{"--mode=management"}, "--mode=management needs --members-from"},
		"plane, profiles":      {[]string{"--mode=management", "--members-from=clusterprofiles", "--clusterprofile-provider-file=/p.json", "--clusterprofile-selector=fleet=gpu"}, ""},
		"plane, secrets":       {[]string{"--mode=management", "--members-from=secrets"}, ""},
		"plane, bad inventory": {[]string{"--mode=management", "--members-from=files"}, `--members-from must be "clusterprofiles" or "secrets", got "files"`},
		"plane, no providers":  {[]string{"--mode=management", "--members-from=clusterprofiles"}, "--members-from=clusterprofiles needs --clusterprofile-provider-file"},
		"plane, bad selector":  {[]string{"--mode=management", "--members-from=clusterprofiles", "--clusterprofile-provider-file=/p.json", "--clusterprofile-selector=a b"}, `--clusterprofile-selector="a b" is not a label selector`},
		"plane, bad configmap": {[]string{"--mode=management", "--members-from=secrets", "--members-configmap=Members"}, `--members-configmap="Members" is not a ConfigMap name`},
		"plane, enrolled":      {[]string{"--mode=management", "--members-from=secrets", "--enrolled-namespaces=ml"}, "--enrolled-namespaces is set but --mode=management writes no Kueue objects"},
		"plane, bad origin":    {[]string{"--mode=management", "--members-from=secrets", "--origin=a b"}, `--origin="a b" must be a non-empty label value`},
		"insecure kubeconfigs": {[]string{"--mode=management", "--members-from=secrets", "--members-allow-insecure-kubeconfigs"}, ""},
		"insecure, profiles": {[]string{"--mode=management", "--members-from=clusterprofiles", "--clusterprofile-provider-file=/p.json", "--members-allow-insecure-kubeconfigs"},
			"--members-allow-insecure-kubeconfigs is set but --members-from=clusterprofiles reads no kubeconfig: drop it"},
		"insecure in workload": {[]string{"--mode=workload", "--members-allow-insecure-kubeconfigs"}, "--members-allow-insecure-kubeconfigs is set but --mode=workload: only a management plane reads member kubeconfigs; drop it"},
		"members in workload":  {[]string{"--mode=workload", "--members-from=secrets"}, "--members-from is set but --mode=workload"},
		"bad namespace":        {[]string{"--mode=workload", "--enrolled-namespaces=ML_Serving"}, `--enrolled-namespaces: "ML_Serving" is not a namespace name`},
		"no resources":         {[]string{"--mode=workload", "--capacity-resources="}, "--capacity-resources must name at least one resource"},
		"bad cover ceiling":    {[]string{"--mode=workload", "--cover-resources=rdma/x=lots"}, "--cover-resources: the ceiling of rdma/x must be a positive quantity"},
		"hysteresis too high":  {[]string{"--mode=workload", "--capacity-hysteresis-percent=150"}, "--capacity-hysteresis-percent must be between 0 and 100"},
		"negative depth":       {[]string{"--mode=workload", "--max-tree-depth=-1"}, "--max-tree-depth must be 0"},
		"prune with no age":    {[]string{"--mode=workload", "--event-log=/tmp/x", "--event-log-prune-siblings"}, "--event-log-prune-siblings removes the logs beside --event-log last written longer ago than --event-log-max-age: it needs both set"},
		"log too small":        {[]string{"--mode=workload", "--event-log=/tmp/x", "--event-log-max-bytes=16384"}, "--event-log: each log of the webhook's verdicts, a sixteenth of --event-log-max-bytes: the event log's size bound (1024 bytes) must be at least one segment (4096 bytes); raise --event-log-max-bytes"},
		"negative report":      {[]string{"--mode=workload", "--capacity-report-interval=-1s"}, "--capacity-report-interval must not be negative"},
		"zero resync":          {[]string{"--mode=workload", "--resync-interval=0s"}, "--resync-interval must be positive"},
		"cert dir, plain HTTP": {[]string{"--mode=workload", "--metrics-secure=false", "--metrics-cert-dir=/certs"}, "--metrics-cert-dir=/certs is set but --metrics-secure=false serves plain HTTP"},
		"too many covers":      {[]string{"--mode=workload", "--cover-resources=a/1=1,a/2=1,a/3=1,a/4=1,a/5=1,a/6=1,a/7=1,a/8=1,a/9=1,a/10=1,a/11=1,a/12=1,a/13=1,a/14=1"}, "--cover-resources: 17 cover resources with cpu, memory and ephemeral-storage, but at most 16 fit"},
		"thirteen covers":      {[]string{"--mode=workload", "--cover-resources=a/1=1,a/2=1,a/3=1,a/4=1,a/5=1,a/6=1,a/7=1,a/8=1,a/9=1,a/10=1,a/11=1,a/12=1,a/13=1"}, ""},
		"lease timings":        {[]string{"--mode=workload", "--leader-election-lease-duration=5s", "--leader-election-renew-deadline=10s"}, "--leader-election-lease-duration (5s) must exceed --leader-election-renew-deadline (10s)"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			flagtest.WantError(t, flagtest.Validate(t, DefaultOptions(), tc.args...), tc.want)
		})
	}
}

func TestTickInterval(t *testing.T) {
	o := DefaultOptions()
	if got := o.TickInterval(); got.String() != "1m0s" {
		t.Errorf("default tick %s, want the report interval 1m", got)
	}
	o.ReportInterval = 0
	if got := o.TickInterval(); got.String() != "10m0s" {
		t.Errorf("tick with reporting off %s, want the resync interval 10m", got)
	}
}

// Two replicas on one host must not hold the Lease as one holder: the
// default identity is the hostname plus a random suffix, new per process.
func TestLeaderIdentity(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip("no hostname")
	}
	o := DefaultOptions()
	a, err := o.LeaderIdentity()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := o.LeaderIdentity()
	if a == b || !strings.HasPrefix(a, host+"_") || len(a) <= len(host)+1 {
		t.Errorf("identities %q and %q: want %q, an underscore and a random suffix, different each time", a, b, host)
	}
	o.Identity = "replica-a"
	if id, _ := o.LeaderIdentity(); id != "replica-a" {
		t.Errorf("--leader-election-identity=replica-a gave %q", id)
	}
}
