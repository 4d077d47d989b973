package webhook

import (
	"bytes"
	"cmp"
	"context"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"

	"ome.io/quota-manager/api/v1beta1"
	"ome.io/quota-manager/events"
	"ome.io/quota-manager/metrics"
	"ome.io/quota-manager/state"
)

// Verdict labels of the ome_quota_webhook_verdicts_total metric.
const (
	VerdictAllowed     = "allowed"
	VerdictWarned      = "allowed_with_warnings"
	VerdictDenied      = "denied"
	VerdictMalformed   = "malformed"
	VerdictUnavailable = metrics.VerdictUnavailable
)

// Reviewer answers AdmissionReviews for AcceleratorQuotas.
type Reviewer struct {
	// Judge decides a write that can change a verdict: a create, a delete,
	// or an update of what the rules read (state.SameShape). An error means
	// the answer cannot be known now: the write is refused with 503.
	Judge func(ctx context.Context, w Write) (Verdict, error)
	// Synced reports whether the state holds the cluster's flavors and
	// capacity yet. Until it does, only writes of root are judged.
	Synced func() bool
	// NotReady says why the replica is not ready (what /readyz prints):
	// the refusal of a write it cannot judge yet carries it. May be nil.
	NotReady func() error
	// OnVerdict, when set, is handed the audit record of each verdict that
	// Judge gave on a write of node that is not a dry run, before the
	// answer goes back: the manager records it in its event stream.
	OnVerdict func(ctx context.Context, node string, v *events.Verdict)
	// Planes are the identities that may write the copies a management
	// plane projects here (state.CheckCopyWrite); none: nobody may.
	Planes []string
	// MayRelease says whether user may release copies, here the copy
	// named name (kubectl ome quota release): the API server's answer to a
	// SubjectAccessReview of verb "release" on acceleratorquotas.ome.io.
	// An error means it cannot be known now: the write is refused with
	// 503. nil: nobody but the plane may touch a copy.
	MayRelease func(ctx context.Context, user authenticationv1.UserInfo, name string) (bool, error)
	// Warn, when set, adds warnings to an admitted write (usageWarnings);
	// it never changes a verdict.
	Warn func(w Write) []string
	// Authenticated: every review comes over a connection whose client
	// certificate the webhook's client CA signed (the audit record says
	// so).
	Authenticated bool
}

// notReady is the refusal of a write that this replica cannot judge,
// carrying the cause and the fix that /readyz prints.
func notReady(cause error) string {
	return fmt.Sprintf("this replica of the quota manager is not ready, so it cannot judge the write: %v", cause)
}

// Write is one write of the tree, as a review carries it.
type Write struct {
	Name string
	// Spec is the spec written; nil deletes the node.
	Spec *v1beta1.AcceleratorQuotaSpec
	// Op is CREATE, UPDATE or DELETE.
	Op admissionv1.Operation
	// Old is the spec the API server judged an UPDATE on, when it sent the
	// old object.
	Old *v1beta1.AcceleratorQuotaSpec
	// ObjectUID is the object's metadata.uid (on CREATE the one the API
	// server gave the new object), Base the resourceVersion of the old
	// object on UPDATE and DELETE.
	ObjectUID string
	Base      string
	UID       types.UID
	DryRun    bool
	// Record is events.RecordOf the written object's managedFields (none
	// on DELETE).
	Record string
}

// Result is the answer to one HTTP request.
type Result struct {
	Review *admissionv1.AdmissionReview
	// HTTPStatus is 200 for every request that carried an AdmissionReview
	// request with a uid (its verdict is in the response), 400 otherwise.
	HTTPStatus int
	// Operation and Verdict label the verdicts metric; Operation is
	// CREATE, UPDATE, DELETE or "other".
	Operation, Verdict string
}

// Review decodes one AdmissionReview (admission.k8s.io/v1) for an
// AcceleratorQuota and judges it. It answers malformed input with a
// denial that says what is wrong, and never panics.
func (r *Reviewer) Review(ctx context.Context, body []byte) Result {
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rev); err != nil {
		return bad("", fmt.Sprintf("the request body is not a JSON AdmissionReview: %s", clip(err.Error())))
	}
	if rev.APIVersion != admissionv1.SchemeGroupVersion.String() || rev.Kind != "AdmissionReview" {
		return bad("", fmt.Sprintf("expected apiVersion %s and kind AdmissionReview, got %q and %q: set admissionReviewVersions to [v1] in the ValidatingWebhookConfiguration",
			admissionv1.SchemeGroupVersion, clip(rev.APIVersion), clip(rev.Kind)))
	}
	req := rev.Request
	if req == nil {
		return bad("", "the AdmissionReview has no request")
	}
	if req.UID == "" {
		return bad("", "the AdmissionReview's request has no uid")
	}
	res := r.judge(ctx, req)
	res.Review.Response.UID = req.UID
	res.HTTPStatus = http.StatusOK
	return res
}

// Refuse answers an AdmissionReview with a denial (code 503) carrying msg,
// without judging it; a body without a request uid gets a 503 of its own.
func (r *Reviewer) Refuse(body []byte, msg string) Result {
	var rev admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &rev); err != nil || rev.Request == nil || rev.Request.UID == "" {
		return badStatus("", http.StatusServiceUnavailable, msg)
	}
	res := answer(Verdict{Code: http.StatusServiceUnavailable, Message: msg})
	res.Review.Response.UID = rev.Request.UID
	res.HTTPStatus = http.StatusOK
	res.Operation, res.Verdict = opLabel(rev.Request.Operation), VerdictUnavailable
	return res
}

// opLabel is an operation as the verdicts metric labels it: CREATE, UPDATE,
// DELETE, or "other" for any other string a caller sent, so that a caller
// cannot add labels.
func opLabel(op admissionv1.Operation) string {
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Delete:
		return string(op)
	}
	return "other"
}

func (r *Reviewer) judge(ctx context.Context, req *admissionv1.AdmissionRequest) Result {
	op := opLabel(req.Operation)
	labeled := func(v Verdict, verdict string) Result {
		res := answer(v)
		res.Operation, res.Verdict = op, verdict
		return res
	}
	refused := func(code int, verdict, format string, args ...any) Result {
		return labeled(Verdict{Code: int32(code), Message: fmt.Sprintf(format, args...)}, verdict)
	}
	malformed := func(format string, args ...any) Result {
		return refused(http.StatusBadRequest, VerdictMalformed, format, args...)
	}
	allowed := labeled(Verdict{Allowed: true}, VerdictAllowed)
	switch {
	case req.Kind.Group != v1beta1.GroupName || req.Kind.Kind != "AcceleratorQuota":
		return malformed("this webhook judges %s AcceleratorQuotas, not %s: fix the rules of the ValidatingWebhookConfiguration",
			v1beta1.GroupName, describeKind(req.Kind))
	case req.SubResource != "":
		// A subresource (status) cannot change the tree.
		return allowed
	case op == "other":
		return malformed("operation %q is not one this webhook judges: its rules should list CREATE, UPDATE and DELETE only", clip(string(req.Operation)))
	case op == string(admissionv1.Delete) && req.Name == "":
		return malformed("request.name is empty: name the AcceleratorQuota to delete")
	}
	w := Write{Name: req.Name, Op: req.Operation, UID: req.UID, DryRun: req.DryRun != nil && *req.DryRun}
	// Each object is read once, its spec kept as bytes: the API server
	// sends them whole (status, managedFields), and nothing else of them
	// matters here. The old object is read for an UPDATE and a DELETE.
	var obj, old *rawObject
	if req.Operation != admissionv1.Create {
		old, _ = readObject(req.OldObject.Raw)
	}
	if req.Operation != admissionv1.Delete {
		// The CRD's limits first, on the raw object, so that a forged
		// review of 50,000 budgets costs a walk of its first 17, not a
		// decoding of them all, and never reaches the Judge. A spec that
		// breaks them is let through only unchanged, as the API server's
		// validation ratchets: the path below allows it without reading it.
		var err error
		if err = v1beta1.CheckObjectLimits(req.Object.Raw); err != nil {
			spec := v1beta1.RawSpec(req.Object.Raw)
			if old == nil || len(spec) == 0 || !bytes.Equal(spec, v1beta1.RawSpec(req.OldObject.Raw)) {
				return malformed("request.object: %v", err)
			}
		}
		if obj, err = readObject(req.Object.Raw); err != nil {
			return malformed("request.object: %v", err)
		}
		if w.Name = cmp.Or(w.Name, obj.Metadata.Name); w.Name == "" {
			return malformed("the AcceleratorQuota has no name")
		}
		if obj.Metadata.Name != "" && obj.Metadata.Name != w.Name {
			return malformed("request.name is %q but the object is named %q", clip(w.Name), clip(obj.Metadata.Name))
		}
		if len(w.Name) > v1beta1.MaxNameLength {
			return malformed("metadata.name is %d characters long, more than %d, the most the quota manager's CRD allows (a parentRef and the admission ledger hold no more): choose a shorter name",
				len(w.Name), v1beta1.MaxNameLength)
		}
	}
	if why := r.copyWrite(req, w.Name, old, obj); why != "" {
		step := releaseStep(old, obj)
		if step == "" || r.MayRelease == nil {
			if req.Operation == admissionv1.Delete && old != nil {
				why += fmt.Sprintf("; a copy of a plane that no longer reaches this cluster is removed by whoever may release it (cluster-admin may): kubectl ome quota release --origin %s",
					clip(old.Metadata.Labels[v1beta1.OriginLabel]))
			}
			return refused(http.StatusForbidden, VerdictDenied, "%s", why)
		}
		ok, err := r.MayRelease(ctx, req.UserInfo, w.Name)
		switch {
		case err != nil:
			return refused(http.StatusServiceUnavailable, VerdictUnavailable,
				"the quota manager cannot ask the API server whether %s may release %s: %v; retry in a few seconds", clip(req.UserInfo.Username), w.Name, err)
		case !ok:
			return refused(http.StatusForbidden, VerdictDenied, "%s; %s may not release it either: releasing a copy needs the verb \"release\" on acceleratorquotas.ome.io", why, clip(req.UserInfo.Username))
		case step == "mark":
			return allowed
		}
		// A released copy's deletion is judged and recorded like any other.
	}
	if old != nil {
		w.ObjectUID, w.Base = old.Metadata.UID, old.Metadata.ResourceVersion
	}
	if obj != nil {
		if old != nil && len(obj.Spec) > 0 && bytes.Equal(obj.Spec, old.Spec) {
			// The API server encodes both objects alike: a spec that
			// reads the same byte for byte (a label, a finalizer) needs
			// no decoding at all.
			return allowed
		}
		var err error
		if w.Spec, err = obj.quotaSpec(); err != nil {
			return malformed("request.object: %v", err)
		}
		w.ObjectUID = obj.Metadata.UID
		w.Record = events.RecordOf(obj.Metadata.ManagedFields)
	}
	if old != nil && obj != nil {
		// A write that leaves alone what the rules read (labels,
		// finalizers, fields no rule reads) cannot change a verdict: it is
		// neither judged nor serialized.
		oldSpec, err := old.quotaSpec()
		if err == nil && state.SameShape(w.Name, oldSpec, w.Spec) {
			// A borrowingLimit lowered below usage still warns.
			w.Old = oldSpec
			if v := r.warned(Verdict{Allowed: true}, w); len(v.Warnings) > 0 {
				return labeled(v, VerdictWarned)
			}
			return allowed
		}
		w.Old = oldSpec
		if errors.Is(err, v1beta1.ErrLimits) {
			req.OldObject.Raw = nil // not decoded for the audit record either
		}
	} else if old != nil && v1beta1.CheckSpecLimits(old.Spec) != nil {
		req.OldObject.Raw = nil // a delete: judged, but its old spec not decoded
	}
	if why := unreservable(req.UID, w); why != "" {
		return malformed("%s", why)
	}
	unavailable := func(format string, args ...any) Result {
		return refused(http.StatusServiceUnavailable, VerdictUnavailable, format, args...)
	}
	if w.Name != v1beta1.RootName && r.Synced != nil && !r.Synced() {
		cause := errors.New("it is loading the cluster's flavors and capacity: retry in a few seconds")
		if r.NotReady != nil {
			cause = cmp.Or(r.NotReady(), cause)
		}
		return unavailable("%s", notReady(cause))
	}
	// The decision point: the verdict, req (its UserInfo, and the old and
	// new objects) and w are all at hand here.
	v, err := r.Judge(ctx, w)
	if err != nil {
		return unavailable("the quota manager cannot judge this write now: %v; retry in a few seconds", err)
	}
	v = r.warned(v, w)
	if r.OnVerdict != nil && !w.DryRun {
		a := auditOf(req, w, v)
		a.Authenticated = r.Authenticated
		r.OnVerdict(ctx, w.Name, a)
	}
	switch {
	case !v.Allowed:
		return labeled(v, VerdictDenied)
	case len(v.Warnings) > 0:
		return labeled(v, VerdictWarned)
	}
	return labeled(v, VerdictAllowed)
}

// The AdmissionLedger CRD's bounds on what a reservation copies from a
// review (v1beta1.Reservation): the review's uid, the object's uid, the
// base.
const (
	maxReviewUID = 64
	maxObjectUID = 64
	maxBase      = 32
)

// unreservable says why the ledger could not hold w's reservation, or "":
// a uid or a base longer than its field, or a base that is not a number
// (the state reads resourceVersions as numbers; one it cannot would
// never settle). It is checked before anything is read or written for
// the review; the API server sends UUIDs and etcd's versions, far within.
func unreservable(uid types.UID, w Write) string {
	switch {
	case len(uid) > maxReviewUID:
		return fmt.Sprintf("request.uid is %d bytes long, more than the %d the admission ledger holds: the API server sends a UUID", len(uid), maxReviewUID)
	case len(w.ObjectUID) > maxObjectUID:
		return fmt.Sprintf("the object's metadata.uid is %d bytes long, more than the %d the admission ledger holds: the API server gives a UUID", len(w.ObjectUID), maxObjectUID)
	case len(w.Base) > maxBase:
		return fmt.Sprintf("request.oldObject's metadata.resourceVersion is %d bytes long, more than the %d the admission ledger holds", len(w.Base), maxBase)
	case w.Base != "" && parseVersion(w.Base) == 0:
		return fmt.Sprintf("request.oldObject's metadata.resourceVersion %q is not a positive number, as the API server's are", clip(w.Base))
	}
	return ""
}

// copyWrite is why a write of a copy that a management plane projected
// here is refused (state.CheckCopyWrite), or "".
func (r *Reviewer) copyWrite(req *admissionv1.AdmissionRequest, name string, old, obj *rawObject) string {
	var from, to string
	if old != nil {
		from, name = old.Metadata.Labels[v1beta1.OriginLabel], cmp.Or(name, old.Metadata.Name)
	}
	if obj != nil {
		to = obj.Metadata.Labels[v1beta1.OriginLabel]
	}
	return state.CheckCopyWrite(name, from, to, req.UserInfo.Username, req.UserInfo.Groups, r.Planes)
}

// releaseStep is which step of a release (kubectl ome quota release) a
// write of a copy is: "mark" for an update that only sets the annotation
// ome.io/quota-release to the copy's origin, "delete" for the deletion of a
// copy so marked; "" for any other write.
func releaseStep(old, obj *rawObject) string {
	if old == nil {
		return ""
	}
	origin := old.Metadata.Labels[v1beta1.OriginLabel]
	if origin == "" {
		return ""
	}
	if obj == nil {
		if old.Metadata.Annotations[v1beta1.ReleaseAnnotation] == origin {
			return "delete"
		}
		return ""
	}
	if obj.Metadata.Annotations[v1beta1.ReleaseAnnotation] != origin || !maps.Equal(old.Metadata.Labels, obj.Metadata.Labels) ||
		len(obj.Spec) == 0 || !bytes.Equal(old.Spec, obj.Spec) {
		return ""
	}
	for k, v := range obj.Metadata.Annotations {
		if k != v1beta1.ReleaseAnnotation && old.Metadata.Annotations[k] != v {
			return ""
		}
	}
	for k := range old.Metadata.Annotations {
		if _, kept := obj.Metadata.Annotations[k]; !kept {
			return ""
		}
	}
	return "mark"
}

// rawObject is what a review reads of an object the API server sends:
// its type, name and generation, and its spec as bytes. The rest (status,
// managedFields: most of a stored object) is skipped, not decoded.
type rawObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string            `json:"name"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Generation      int64             `json:"generation"`
		Labels          map[string]string `json:"labels"`
		Annotations     map[string]string `json:"annotations"`
		// ManagedFields are the API server's record of who wrote the
		// object and when (events.RecordOf).
		ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
	} `json:"metadata"`
	Spec stdjson.RawMessage `json:"spec"`
}

// readObject reads a request's raw object, with the API server's own JSON
// rules (case-sensitive field names); nil with an error when there is none
// or it is not an object of that shape.
func readObject(raw []byte) (*rawObject, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("it is empty: the API server sends the object on CREATE and UPDATE")
	}
	o := &rawObject{}
	if err := json.Unmarshal(raw, o); err != nil {
		return nil, fmt.Errorf("it is not an AcceleratorQuota: %v", err)
	}
	return o, nil
}

// quotaSpec checks that o is an AcceleratorQuota and decodes its spec,
// refusing a spec that breaks the CRD's limits (an error that is v1beta1.ErrLimits)
// before it is decoded, and amounts outside the bounds before they are
// parsed.
func (o *rawObject) quotaSpec() (*v1beta1.AcceleratorQuotaSpec, error) {
	spec := &v1beta1.AcceleratorQuotaSpec{}
	if len(o.Spec) > 0 {
		if err := v1beta1.CheckSpecLimits(o.Spec); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(o.Spec, spec); err != nil {
			return nil, fmt.Errorf("it is not an AcceleratorQuota: %v", err)
		}
	}
	if o.APIVersion != "" && (o.APIVersion != v1beta1.SchemeGroupVersion.String() || o.Kind != "AcceleratorQuota") {
		return nil, fmt.Errorf("it is a %s %s, not an %s AcceleratorQuota", clip(o.APIVersion), clip(o.Kind), v1beta1.SchemeGroupVersion)
	}
	return spec, nil
}

func describeKind(k metav1.GroupVersionKind) string {
	if k.Group == "" && k.Kind == "" {
		return "an object of no kind"
	}
	return clip(fmt.Sprintf("%s/%s %s", k.Group, k.Version, k.Kind))
}

// maxEcho bounds how much of a string the caller chose goes back into a
// message or a log line: a review is up to MaxRequestBytes.
const maxEcho = 256

// clip shortens a string the caller chose to at most maxEcho bytes, saying
// how long it was.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return fmt.Sprintf("%s... (%d bytes)", strings.ToValidUTF8(s[:maxEcho], ""), len(s))
}

// answer wraps a verdict into an AdmissionReview response.
func answer(v Verdict) Result {
	resp := &admissionv1.AdmissionResponse{Allowed: v.Allowed, Warnings: v.Warnings}
	if !v.Allowed {
		st := &metav1.Status{Status: metav1.StatusFailure, Code: v.Code, Message: v.Message}
		switch v.Code {
		case http.StatusForbidden:
			st.Reason = metav1.StatusReasonForbidden
		case http.StatusBadRequest:
			st.Reason = metav1.StatusReasonBadRequest
		case http.StatusRequestEntityTooLarge:
			st.Reason = metav1.StatusReasonRequestEntityTooLarge
		case http.StatusServiceUnavailable:
			st.Reason = metav1.StatusReasonServiceUnavailable
		}
		resp.Result = st
	}
	return Result{
		Review: &admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Response: resp,
		},
	}
}

// bad answers a body that carries no usable request: HTTP 400, with a
// response that says why.
func bad(uid types.UID, msg string) Result {
	return badStatus(uid, http.StatusBadRequest, msg)
}

func badStatus(uid types.UID, code int, msg string) Result {
	res := answer(Verdict{Code: int32(code), Message: msg})
	res.Review.Response.UID = uid
	res.HTTPStatus = code
	res.Operation, res.Verdict = "other", VerdictMalformed
	return res
}
