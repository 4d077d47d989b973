package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	aqac "ome.io/quota-manager/api/client/applyconfiguration/api/v1beta1"
	v1beta1 "ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/projector"
)

// conflictRetry is how soon a conditional status write that met a newer
// version is tried again.
const conflictRetry = 200 * time.Millisecond

// statusWrites applies every node status that differs from the cached one,
// stamps as the projection dated them; conditional on version when it is
// not empty.
func (a *Applier) statusWrites(ctx context.Context, out *projector.Output, res *Result, version string) []write {
	names := make([]string, 0, len(out.Statuses))
	for n := range out.Statuses {
		names = append(names, n)
	}
	sort.Strings(names)
	var ws []write
	for _, name := range names {
		cur := a.Listers.AQ(name)
		if cur == nil || !cur.DeletionTimestamp.IsZero() && name != v1beta1.RootName {
			continue
		}
		h := hashOf(out.Statuses[name])
		a.seenMu.Lock()
		sent, ok := a.statusSent[name]
		a.seenMu.Unlock()
		if ok && sent.hash == h && sent.before == cur.ResourceVersion {
			continue // written, not yet in the cache
		}
		desired, err1 := toJSONMap(out.Statuses[name])
		cached, err2 := toJSONMap(&cur.Status)
		if err1 != nil || err2 != nil {
			res.Errors = append(res.Errors, fmt.Errorf("encoding the status of %s: %w", name, errors.Join(err1, err2)))
			continue
		}
		a.Schema.Load().Prune(desired)
		if covers(desired, cached) && covers(cached, desired) {
			continue
		}
		before := cur.ResourceVersion
		klog.V(4).InfoS("status differs", "node", name, "desired", desired, "cached", cached)
		node := name
		ws = append(ws, write{kind: "status", node: node, name: node, do: func(ctx context.Context) error {
			meta := map[string]any{"name": node}
			if version != "" {
				meta["resourceVersion"] = version
			}
			body, err := json.Marshal(map[string]any{
				"apiVersion": v1beta1.SchemeGroupVersion.String(), "kind": "AcceleratorQuota",
				"metadata": meta, "status": desired,
			})
			if err != nil {
				return err
			}
			force := true
			_, err = a.aqs(res).Patch(ctx, node, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, "status")
			if apierrors.IsNotFound(err) {
				return nil
			}
			if version != "" && apierrors.IsConflict(err) {
				// Written on a version the state has not read yet: again
				// once it has.
				res.retryAt(a.Now().Add(conflictRetry))
				return nil
			}
			if err == nil {
				a.seenMu.Lock()
				if a.statusSent == nil {
					a.statusSent = map[string]statusSeen{}
				}
				a.statusSent[node] = statusSeen{before: before, hash: h}
				a.seenMu.Unlock()
			}
			return err
		}})
	}
	return ws
}

// StatusApply is the apply configuration of a node's status: name and
// status only, the fields the field manager then owns.
func StatusApply(name string, st *v1beta1.AcceleratorQuotaStatus) (*aqac.AcceleratorQuotaApplyConfiguration, error) {
	data, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encoding the status of %s: %w", name, err)
	}
	sac := &aqac.AcceleratorQuotaStatusApplyConfiguration{}
	if err := json.Unmarshal(data, sac); err != nil {
		return nil, fmt.Errorf("encoding the status of %s: %w", name, err)
	}
	return aqac.AcceleratorQuota(name).WithStatus(sac), nil
}
