package render

// DefaultImage is the kvrouter image (router and vllm-sim) used when Options.Image is empty.
const DefaultImage = "ghcr.io/kvrouter/kvrouter:v0.1.0"

// Options are the operator-level settings that shape the objects, as opposed to the per-KVRouter
// spec.
type Options struct {
	// Image is the kvrouter image that runs the router, and vllm-sim in simulate mode.
	// spec.router.image overrides it per KVRouter. Empty: DefaultImage.
	Image string

	// LabelAllowList names the labels of the KVRouter copied onto its children. Nil:
	// DefaultLabelAllowList. An empty, non-nil list copies none.
	LabelAllowList []string
}

func (o Options) image() string {
	if o.Image == "" {
		return DefaultImage
	}
	return o.Image
}
