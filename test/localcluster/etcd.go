package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// CompactEtcd compacts etcd's history up to its newest revision, as the
// API server does every five minutes, and returns that revision. A watch
// that resumes from an older resourceVersion then ends with 410 Gone,
// unless the API server's watch cache still serves it (turn the cache off
// for the resource with --watch-cache-sizes=RESOURCE.GROUP#0). It goes
// through etcd's JSON gateway on its client URL.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	base := c.env.ControlPlane.Etcd.URL.String()
	var head struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// Any read returns the store's newest revision in its header.
	if err := etcdCall(ctx, base+"/v3/kv/range", map[string]any{"key": "AA==", "count_only": true}, &head); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(head.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd's revision %q: %w", head.Header.Revision, err)
	}
	if err := etcdCall(ctx, base+"/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil); err != nil {
		return 0, err
	}
	return rev, nil
}

// etcdCall posts req as JSON to url and decodes the answer into out.
func etcdCall(ctx context.Context, url string, req, out any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd answered %s to %s: %s", resp.Status, url, body)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(body, out)
}
