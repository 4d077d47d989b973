package v1beta1

// Limits of an AcceleratorQuota's spec that its CRD's schema enforces
// (config/crd/ome.io_acceleratorquotas.yaml), for code that must hold them
// before the API server has, such as the webhook reading a review. A
// kubebuilder marker cannot name a constant: each constant names the
// marker in types.go that states the same number, and a test of the webhook
// (TestCRDLimits) checks the generated CRD against them. Lengths count
// characters, as the schema's maxLength does.
const (
	// MaxBudgets is +kubebuilder:validation:MaxItems=16 on
	// AcceleratorQuotaSpec.Budgets.
	MaxBudgets = 16
	// MaxPerCluster is +kubebuilder:validation:MaxItems=256 on
	// Budget.PerCluster.
	MaxPerCluster = 256
	// MaxGoneClusters is +kubebuilder:validation:MaxItems=256 on
	// AcceleratorQuotaSpec.GoneClusters; each name's length is
	// MaxClusterNameLength (MaxLength=253 on GoneCluster.Name).
	MaxGoneClusters = 256
	// MaxMemberStatuses is +kubebuilder:validation:MaxItems=512 on
	// AcceleratorQuotaStatus.Members: a fleet's members and the clusters
	// declared gone (MaxGoneClusters) together.
	MaxMemberStatuses = 512
	// MaxResourceNameLength is +kubebuilder:validation:MaxLength=253 on
	// Budget.ResourceName.
	MaxResourceNameLength = 253
	// MaxResourceFlavorLength is +kubebuilder:validation:MaxLength=253 on
	// Budget.ResourceFlavor.
	MaxResourceFlavorLength = 253
	// MaxClusterNameLength is +kubebuilder:validation:MaxLength=253 on
	// ClusterShare.Cluster.
	MaxClusterNameLength = 253
	// MaxParentNameLength is +kubebuilder:validation:MaxLength=63 on
	// ParentReference.Name.
	MaxParentNameLength = 63
	// MaxNameLength is the x-kubernetes-validations rule on
	// AcceleratorQuota's metadata.name, and the MaxLength=63 of
	// Reservation.Node in the AdmissionLedger.
	MaxNameLength = 63
)
