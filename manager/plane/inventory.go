package plane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpclient "sigs.k8s.io/cluster-inventory-api/client/clientset/versioned"
	cpinformers "sigs.k8s.io/cluster-inventory-api/client/informers/externalversions/apis/v1alpha1"
	"sigs.k8s.io/cluster-inventory-api/pkg/credentials"

	"ome.io/quota-manager/events"
	"ome.io/quota-manager/manager"
)

// The plane's inventory says which clusters are in its fleet and how to
// reach each. It comes in two kinds (--members-from): the SIG-Multicluster
// ClusterProfiles of one namespace that a label selector picks, reached
// through their access providers and a credential providers file; or a
// ConfigMap whose entries name a kubeconfig Secret per member. Both are
// watched. A cluster joining or leaving is a Membership event in the
// plane's stream; how to reach it goes to the plane directly, since it
// decides nothing in the state.

// memberAccess is how the plane reaches a member: a client configuration,
// or why it has none, and a fingerprint that changes with either.
type memberAccess struct {
	config *rest.Config
	err    error
	key    string
}

func accessOf(cfg *rest.Config, err error, parts ...string) memberAccess {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	if err != nil {
		h.Write([]byte(err.Error()))
	}
	return memberAccess{config: cfg, err: err, key: hex.EncodeToString(h.Sum(nil))}
}

// inventory watches the plane's members.
type inventory interface {
	// start registers its handlers and starts its informers; the state's
	// Synced marker waits on the registrations, so that a plane's first
	// statuses already know every member.
	start(ctx context.Context) ([]cache.ResourceEventHandlerRegistration, error)
}

// memberships publishes the changes between what was published and next,
// by cluster name: the clusters that left first, then those that joined
// or changed.
type memberships struct {
	h         manager.Host
	mu        sync.Mutex
	published map[string]events.Membership
}

func (ms *memberships) set(ctx context.Context, next map[string]events.Membership, gone func(name string) string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.published == nil {
		ms.published = map[string]events.Membership{}
	}
	log := klog.FromContext(ctx)
	var evs []events.Event
	for _, name := range slices.Sorted(maps.Keys(ms.published)) {
		if _, ok := next[name]; !ok {
			left := events.Membership{Source: ms.published[name].Source, Message: gone(name)}
			evs = append(evs, events.MembershipChanged(time.Now(), name, left))
			log.Info("a member cluster left the fleet", "member", name, "why", left.Message)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(next)) {
		cur, had := ms.published[name]
		if had && cur == next[name] {
			continue
		}
		evs = append(evs, events.MembershipChanged(time.Now(), name, next[name]))
		if !had {
			log.Info("a member cluster joined the fleet", "member", name, "source", next[name].Source)
		}
	}
	for _, ev := range evs {
		if _, err := ms.h.Publish(ctx, ev); err != nil {
			if ctx.Err() == nil {
				log.Error(err, "cannot publish a change of the fleet's members", "member", ev.Key)
			}
			return // published stays as it was: the next change retries
		}
		if ev.Membership.Member {
			ms.published[ev.Key] = *ev.Membership
		} else {
			delete(ms.published, ev.Key)
		}
	}
}

// profileInventory lists the members from ClusterProfiles.
type profileInventory struct {
	p         *plane
	client    cpclient.Interface
	namespace string
	selector  labels.Selector
	creds     *credentials.CredentialsProvider
	file      string
	inf       cache.SharedIndexInformer
	members   memberships
	// pluginTimeout bounds one run of a credential plugin; pluginRetry is
	// how soon one that failed runs again.
	pluginTimeout, pluginRetry time.Duration

	// mu serializes what the inventory says to the plane: a resync, and
	// the outcome of each plugin run.
	mu sync.Mutex
	// probes are the runs of the profiles' credential plugins, by member.
	probes map[string]*pluginProbe
	// refused are the profiles refused as duplicates, and why, as last
	// logged.
	refused map[string]string
}

// pluginProbe checks one profile's access before the plane uses it: its
// provider's credential plugin is run once, and the access is given to
// the plane only when the plugin answers with a credential; else the
// member is unreachable for a reason carrying the plugin's own words, and
// the plugin runs again pluginRetry later.
type pluginProbe struct {
	key    string // the fingerprint of the access checked
	cfg    *rest.Config
	parts  []string
	what   string
	done   bool
	access memberAccess
}

func newProfileInventory(p *plane, cfg *rest.Config) (*profileInventory, error) {
	o := p.opts
	sel, err := labels.Parse(o.ClusterProfileSelector)
	if err != nil {
		return nil, fmt.Errorf("--clusterprofile-selector=%q: %w", o.ClusterProfileSelector, err)
	}
	creds, err := credentials.NewFromFile(o.ClusterProfileProviders)
	if err != nil {
		return nil, fmt.Errorf("--clusterprofile-provider-file=%s: %w", o.ClusterProfileProviders, err)
	}
	if len(creds.Providers) == 0 {
		return nil, fmt.Errorf("--clusterprofile-provider-file=%s lists no providers: add one (e.g. the secretreader plugin) for the access providers your ClusterProfiles publish", o.ClusterProfileProviders)
	}
	for _, pr := range creds.Providers {
		if pr.Name == "" || pr.ExecConfig == nil || pr.ExecConfig.Command == "" {
			return nil, fmt.Errorf("--clusterprofile-provider-file=%s: every provider needs a name and an execConfig with a command", o.ClusterProfileProviders)
		}
	}
	cs, err := cpclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	inv := &profileInventory{p: p, client: cs, namespace: o.ClusterProfileNamespace, selector: sel, creds: creds,
		file: o.ClusterProfileProviders, pluginTimeout: pluginTimeout, pluginRetry: pluginRetry,
		probes: map[string]*pluginProbe{}, refused: map[string]string{}}
	inv.members.h = p.h
	return inv, nil
}

func (inv *profileInventory) start(ctx context.Context) ([]cache.ResourceEventHandlerRegistration, error) {
	inv.inf = cpinformers.NewClusterProfileInformer(inv.client, inv.namespace, 0, cache.Indexers{})
	changed := func() { inv.resync(ctx) }
	reg, err := inv.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() }, UpdateFunc: func(any, any) { changed() }, DeleteFunc: func(any) { changed() },
	})
	if err != nil {
		return nil, err
	}
	go inv.inf.RunWithContext(ctx)
	return []cache.ResourceEventHandlerRegistration{reg}, nil
}

// resync reads every ClusterProfile of the namespace: the selected ones
// are the fleet, but for those that reach a cluster an older one already
// reaches.
func (inv *profileInventory) resync(ctx context.Context) {
	var profiles []*cpv1alpha1.ClusterProfile
	for _, o := range inv.inf.GetStore().List() {
		profiles = append(profiles, o.(*cpv1alpha1.ClusterProfile))
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	next, accesses, refused, wanted := inv.read(profiles)
	present := map[string]bool{}
	for _, cp := range profiles {
		present[cp.Name] = true
	}
	for _, name := range slices.Sorted(maps.Keys(wanted)) {
		want := wanted[name]
		if pr := inv.probes[name]; pr != nil && pr.key == want.key {
			if pr.done {
				accesses[name] = pr.access
			}
			continue // still running: the access stays as it was until it answers
		}
		inv.probes[name] = want
		go inv.probe(ctx, name, want)
	}
	for name := range inv.probes {
		if _, ok := wanted[name]; !ok {
			delete(inv.probes, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(accesses)) {
		inv.p.setAccess(ctx, name, accesses[name])
	}
	logRefused(ctx, inv.refused, refused)
	inv.members.set(ctx, next, func(name string) string {
		if err, ok := refused[name]; ok {
			return err.Error()
		}
		if present[name] {
			return fmt.Sprintf("its ClusterProfile %s/%s no longer matches the selector %q", inv.namespace, name, inv.selector.String())
		}
		return fmt.Sprintf("its ClusterProfile %s/%s was deleted", inv.namespace, name)
	})
}

// read is what the profiles say: the members, the accesses known at once
// (a refusal, by member), the profiles refused as duplicates, and the
// probes wanted for the others.
func (inv *profileInventory) read(profiles []*cpv1alpha1.ClusterProfile) (map[string]events.Membership, map[string]memberAccess, map[string]error, map[string]*pluginProbe) {
	next := map[string]events.Membership{}
	accesses := map[string]memberAccess{}
	wanted := map[string]*pluginProbe{}
	var entries []clusterEntry
	for _, cp := range profiles {
		if !inv.selector.Matches(labels.Set(cp.Labels)) {
			continue
		}
		what := "ClusterProfile " + cp.Namespace + "/" + cp.Name
		ms := events.Membership{Member: true, Source: what}
		if c := apimeta.FindStatusCondition(cp.Status.Conditions, cpv1alpha1.ClusterConditionControlPlaneHealthy); c != nil {
			ms.Health = string(c.Status)
			if c.Status != metav1.ConditionTrue {
				ms.Message = strings.TrimSpace(c.Reason + ": " + c.Message)
			}
		}
		next[cp.Name] = ms
		parts := profileAccessParts(cp)
		entry := clusterEntry{member: cp.Name, what: what, rank: cp.CreationTimestamp.Time}
		ap, err := accessProviderOf(cp, inv.creds, inv.file)
		if err != nil {
			accesses[cp.Name] = accessOf(nil, err, parts...)
			entries = append(entries, entry)
			continue
		}
		entry.ids = []clusterID{{"the server", serverID(ap.Cluster.Server)}}
		entries = append(entries, entry)
		cfg, err := inv.creds.BuildConfigFromCP(cp)
		if err != nil {
			accesses[cp.Name] = accessOf(nil, fmt.Errorf("%s: %w: publish an access provider that the credential providers file names (%s)", what, err, providerNames(inv.creds)), parts...)
			continue
		}
		wanted[cp.Name] = &pluginProbe{key: accessOf(nil, nil, parts...).key, cfg: cfg, parts: parts,
			what: fmt.Sprintf("%s, access provider %s", what, ap.Name)}
	}
	refused := duplicates(entries, "the older profile (the first by name among profiles created in the same second)",
		"delete one of the profiles, or take one out of the plane's selector")
	for name, err := range refused {
		delete(next, name)
		delete(wanted, name)
		accesses[name] = accessOf(nil, err, "duplicate")
	}
	return next, accesses, refused, wanted
}

// probe runs the profile's credential plugin, gives the plane the outcome
// while pr is still the profile's probe, and runs it again pluginRetry
// after a failure.
func (inv *profileInventory) probe(ctx context.Context, name string, pr *pluginProbe) {
	err := runCredentialPlugin(ctx, pr.cfg, pr.what, inv.pluginTimeout)
	if ctx.Err() != nil {
		return
	}
	var a memberAccess
	if err != nil {
		a = accessOf(nil, err, pr.parts...)
	} else {
		a = accessOf(pr.cfg, nil, pr.parts...)
	}
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.probes[name] != pr {
		return // the profile changed, or left: a newer probe or none speaks for it
	}
	log := klog.FromContext(ctx)
	switch {
	case err != nil && (!pr.done || pr.access.key != a.key):
		log.Error(err, "a member's credential plugin failed: the plane runs it again later", "member", name, "retry", inv.pluginRetry)
	case err == nil && pr.done && pr.access.err != nil:
		log.Info("a member's credential plugin answers again", "member", name)
	}
	pr.done, pr.access = true, a
	inv.p.setAccess(ctx, name, a)
	if err != nil {
		time.AfterFunc(inv.pluginRetry, func() {
			inv.mu.Lock()
			current := inv.probes[name] == pr
			inv.mu.Unlock()
			if current && ctx.Err() == nil {
				inv.probe(ctx, name, pr)
			}
		})
	}
}

// logRefused logs each entry newly refused as a duplicate, or refused for
// another reason, and each no longer refused; last becomes now.
func logRefused(ctx context.Context, last map[string]string, now map[string]error) {
	log := klog.FromContext(ctx)
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if msg := now[name].Error(); last[name] != msg {
			log.Error(now[name], "an entry of the plane's inventory names a cluster another entry names: it is not a member", "entry", name)
			last[name] = msg
		}
	}
	for name := range last {
		if _, ok := now[name]; !ok {
			log.Info("an entry of the plane's inventory no longer names a cluster another entry names", "entry", name)
			delete(last, name)
		}
	}
}

func providerNames(c *credentials.CredentialsProvider) string {
	var out []string
	for _, p := range c.Providers {
		out = append(out, p.Name)
	}
	return strings.Join(out, ", ")
}

// profileAccessParts is what of a ClusterProfile its client configuration
// is built from.
func profileAccessParts(cp *cpv1alpha1.ClusterProfile) []string {
	var out []string
	for _, list := range [][]cpv1alpha1.AccessProvider{cp.Status.CredentialProviders, cp.Status.AccessProviders} {
		for _, ap := range list {
			out = append(out, ap.Name, ap.Cluster.Server, string(ap.Cluster.CertificateAuthorityData), ap.Cluster.ProxyURL, ap.Cluster.TLSServerName)
			for _, e := range ap.Cluster.Extensions {
				out = append(out, e.Name, string(e.Extension.Raw))
			}
		}
		out = append(out, "|")
	}
	return out
}

// secretInventory lists the members from a ConfigMap of the plane's
// namespace: each entry is a member's name and the Secret, in the same
// namespace, whose key (kubeconfig unless the entry says SECRET/KEY)
// holds the kubeconfig that reaches it. The ConfigMap and each Secret are
// watched: a Secret rotated reaches the member at once. Each kubeconfig is
// checked before use (memberKubeconfig), and two entries that name the
// same Secret and key, or whose kubeconfigs reach the same server, are
// one cluster: the first by name is the member, the other is refused.
type secretInventory struct {
	p         *plane
	namespace string
	name      string
	inf       cache.SharedIndexInformer
	members   memberships
	// firstRead bounds how long a change of the ConfigMap waits for the
	// new entries' Secrets to be read before the members are published.
	firstRead time.Duration

	// refreshMu serializes refresh, so that what it says to the plane
	// goes in the order it was read.
	refreshMu sync.Mutex
	// refused are the entries refused as duplicates, and why, as last
	// logged; under refreshMu.
	refused map[string]string

	mu sync.Mutex
	// entries are the ConfigMap's entries as last read; nil before.
	entries map[string]string
	// waiting counts the resyncs waiting for new Secrets to be read:
	// meanwhile a Secret read refreshes nothing, the resync does after.
	waiting int
	secrets map[string]*secretWatch // by member
}

// secretWatch watches one member's Secret.
type secretWatch struct {
	secret, key string
	stop        context.CancelFunc
	// synced is whether the watch's handler has seen the Secret's first
	// list.
	synced cache.InformerSynced
	// read is whether the Secret has been read: access is then how its
	// content reaches the member, and server the server it reaches
	// (serverID; "" when none).
	read   bool
	access memberAccess
	server string
}

// DefaultMemberKey is the Secret key of a member's kubeconfig when its
// entry names none.
const DefaultMemberKey = "kubeconfig"

// secretFirstRead is how long a change of the members' ConfigMap waits
// for the Secrets of its new entries to be read, so that the members it
// publishes already leave out the duplicates; a Secret that cannot be
// read in that time is read later.
const secretFirstRead = 10 * time.Second

func newSecretInventory(p *plane, namespace string) *secretInventory {
	inv := &secretInventory{p: p, namespace: namespace, name: p.opts.MembersConfigMap, firstRead: secretFirstRead,
		secrets: map[string]*secretWatch{}, refused: map[string]string{}}
	inv.members.h = p.h
	return inv
}

func (inv *secretInventory) start(ctx context.Context) ([]cache.ResourceEventHandlerRegistration, error) {
	f := informers.NewSharedInformerFactoryWithOptions(inv.p.h.Kube(), 0, informers.WithNamespace(inv.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", inv.name).String()
		}))
	inv.inf = f.Core().V1().ConfigMaps().Informer()
	changed := func(obj any) {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			inv.resync(ctx, cm)
		}
	}
	reg, err := inv.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, o any) { changed(o) },
		// A deleted ConfigMap says nothing of the fleet: the members stay
		// as they were until it is written again.
		DeleteFunc: func(any) {
			klog.FromContext(ctx).Error(nil, "the members' ConfigMap was deleted: the fleet stays as it was until it is written again (helm upgrade writes it)", "configMap", inv.namespace+"/"+inv.name)
		},
	})
	if err != nil {
		return nil, err
	}
	go inv.inf.RunWithContext(ctx)
	return []cache.ResourceEventHandlerRegistration{reg}, nil
}

// ParseMemberEntry reads one entry of the members' ConfigMap: SECRET or
// SECRET/KEY.
func ParseMemberEntry(name, value string) (secret, key string, err error) {
	secret, key, found := strings.Cut(strings.TrimSpace(value), "/")
	if !found {
		key = DefaultMemberKey
	}
	if secret == "" || key == "" || strings.Contains(key, "/") {
		return "", "", fmt.Errorf("member %s: %q is not SECRET or SECRET/KEY: name the Secret that holds its kubeconfig, and the key if it is not %q", name, value, DefaultMemberKey)
	}
	return secret, key, nil
}

// resync takes a new version of the ConfigMap: it watches the Secrets of
// its entries, waits (up to firstRead) until those of new entries are
// read, and publishes the members.
func (inv *secretInventory) resync(ctx context.Context, cm *corev1.ConfigMap) {
	log := klog.FromContext(ctx)
	var firsts []cache.InformerSynced
	inv.mu.Lock()
	inv.entries = maps.Clone(cm.Data)
	if inv.entries == nil {
		inv.entries = map[string]string{}
	}
	for _, name := range slices.Sorted(maps.Keys(cm.Data)) {
		secret, key, err := ParseMemberEntry(name, cm.Data[name])
		if err != nil {
			// Still a member, unreachable until the entry is fixed: a typo
			// must not take a cluster's copies away.
			log.Error(err, "an entry of the members' ConfigMap does not parse", "configMap", inv.namespace+"/"+inv.name)
			inv.stopSecret(name)
			continue
		}
		if w := inv.secrets[name]; w != nil && w.secret == secret && w.key == key {
			continue
		}
		inv.stopSecret(name)
		firsts = append(firsts, inv.watchSecret(ctx, name, secret, key).synced)
	}
	for name := range inv.secrets {
		if _, ok := cm.Data[name]; !ok {
			inv.stopSecret(name)
		}
	}
	inv.waiting++
	inv.mu.Unlock()
	if len(firsts) > 0 {
		wait, cancel := context.WithTimeout(ctx, inv.firstRead)
		if !cache.WaitForCacheSync(wait.Done(), firsts...) && ctx.Err() == nil {
			log.Info("the Secrets of new members were not all read in time: they join now, and are checked once read", "within", inv.firstRead)
		}
		cancel()
	}
	inv.mu.Lock()
	inv.waiting--
	inv.mu.Unlock()
	inv.refresh(ctx)
}

// refresh tells the plane the members and how to reach each, from the
// ConfigMap and the Secrets as last read.
func (inv *secretInventory) refresh(ctx context.Context) {
	inv.refreshMu.Lock()
	defer inv.refreshMu.Unlock()
	source := "ConfigMap " + inv.namespace + "/" + inv.name
	next := map[string]events.Membership{}
	accesses := map[string]memberAccess{}
	var entries []clusterEntry
	inv.mu.Lock()
	if inv.entries == nil {
		inv.mu.Unlock()
		return
	}
	for _, name := range slices.Sorted(maps.Keys(inv.entries)) {
		value := inv.entries[name]
		secret, key, err := ParseMemberEntry(name, value)
		if err != nil {
			accesses[name] = accessOf(nil, fmt.Errorf("%s: %w", source, err), "entry", value)
			next[name] = events.Membership{Member: true, Source: source}
			continue
		}
		next[name] = events.Membership{Member: true, Source: source + " (Secret " + secret + ", key " + key + ")"}
		e := clusterEntry{member: name, what: fmt.Sprintf("the entry %s of %s", name, source),
			ids: []clusterID{{"the Secret and key", secret + ", key " + key}}}
		if w := inv.secrets[name]; w != nil && w.read {
			accesses[name] = w.access
			e.ids = append(e.ids, clusterID{"the server", w.server})
		}
		entries = append(entries, e)
	}
	inv.mu.Unlock()
	refused := duplicates(entries, "the first by name", "drop one of the entries (the chart's quotaManager.projection.clusters), or point its kubeconfig at a cluster of its own")
	for name, err := range refused {
		delete(next, name)
		accesses[name] = accessOf(nil, err, "duplicate")
	}
	for _, name := range slices.Sorted(maps.Keys(accesses)) {
		inv.p.setAccess(ctx, name, accesses[name])
	}
	logRefused(ctx, inv.refused, refused)
	inv.members.set(ctx, next, func(name string) string {
		if err, ok := refused[name]; ok {
			return err.Error()
		}
		return fmt.Sprintf("it is no longer listed in the ConfigMap %s/%s", inv.namespace, inv.name)
	})
}

func (inv *secretInventory) stopSecret(member string) {
	if w := inv.secrets[member]; w != nil {
		w.stop()
		delete(inv.secrets, member)
	}
}

// watchSecret watches member's Secret; each version of it is the
// member's access. inv.mu is held.
func (inv *secretInventory) watchSecret(ctx context.Context, member, secret, key string) *secretWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &secretWatch{secret: secret, key: key, stop: cancel}
	inv.secrets[member] = w
	f := informers.NewSharedInformerFactoryWithOptions(inv.p.h.Kube(), 0, informers.WithNamespace(inv.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", secret).String()
		}))
	inf := f.Core().V1().Secrets().Informer()
	where := fmt.Sprintf("Secret %s/%s", inv.namespace, secret)
	set := func(s *corev1.Secret) {
		if ctx.Err() != nil {
			return
		}
		var a memberAccess
		server := ""
		switch data, ok := secretData(s, key); {
		case s == nil:
			a = accessOf(nil, fmt.Errorf("%s does not exist: create it with the kubeconfig that reaches %s under key %s", where, member, key), "missing", secret)
		case !ok:
			a = accessOf(nil, fmt.Errorf("%s has no key %s: put the kubeconfig that reaches %s there", where, key, member), "nokey", secret, string(s.UID), s.ResourceVersion)
		default:
			cfg, srv, err := memberKubeconfig(member, where+", key "+key, data, inv.p.opts.MembersAllowInsecureKubeconfigs)
			a, server = accessOf(cfg, err, "secret", secret, key, string(data)), srv
		}
		inv.mu.Lock()
		current := inv.secrets[member] == w
		if current {
			w.read, w.access, w.server = true, a, server
		}
		now := current && inv.waiting == 0
		inv.mu.Unlock()
		if now {
			inv.refresh(ctx)
		}
	}
	handled := inf.HasSynced
	if reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { set(o.(*corev1.Secret)) },
		UpdateFunc: func(_, o any) { set(o.(*corev1.Secret)) },
		DeleteFunc: func(any) { set(nil) },
	}); err == nil {
		handled = reg.HasSynced
	}
	go inf.RunWithContext(ctx)
	// Until the Secret is listed, the member has no access yet: say so
	// after the first list if the Secret is missing.
	listed := make(chan struct{})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced, handled) && len(inf.GetStore().List()) == 0 {
			set(nil)
		}
		close(listed)
	}()
	w.synced = func() bool {
		select {
		case <-listed:
			return true
		default:
			return false
		}
	}
	return w
}

// secretData is the Secret's key, and whether it has it.
func secretData(s *corev1.Secret, key string) ([]byte, bool) {
	if s == nil {
		return nil, false
	}
	data, ok := s.Data[key]
	return data, ok
}
