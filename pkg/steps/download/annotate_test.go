package download

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sglprov/sglprov/pkg/cache"
	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/test/fakehub"
	"github.com/sglprov/sglprov/test/ociregistry"
)

// TestPublishAnnotatesTheModel: the artifact a download publishes names, on its manifest,
// the hub repository, the revision the recipe asked for and the commit it resolved to,
// beside what the caller put on the context and the time it was made.
func TestPublishAnnotatesTheModel(t *testing.T) {
	ctx := context.Background()
	reg := ociregistry.StartT(t)
	fx := newFixture(t, fakehub.Options{})
	pusher, err := cache.New(cache.Config{Repository: reg.Addr + "/fleet/weights", Push: true}, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tag := strings.Repeat("5e", 32)
	slot := engine.CacheSlot{Cache: pusher, Tag: tag}
	spec := fx.hfSpec("main")
	spec.StallTimeout, spec.Retries = "60s", 3
	st := fx.step(t, spec, nil)
	if err := st.RunCached(ctx, fx.env, slot); err != nil {
		t.Fatal(err)
	}
	pctx := cache.WithAnnotations(ctx, map[string]string{cache.AnnotationRecipe: "r1"})
	if _, err := st.Publish(pctx, fx.env, slot); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+reg.Addr+"/v2/fleet/weights/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var m struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest %s: %v", b, err)
	}
	want := map[string]string{
		"org.sglprov.model": repo, "org.sglprov.revision": "main",
		"org.sglprov.model.commit": fx.hub.Commit(), "org.sglprov.recipe": "r1",
	}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q (all: %v)", k, m.Annotations[k], v, m.Annotations)
		}
	}
	if m.Annotations["org.opencontainers.image.created"] == "" {
		t.Errorf("no org.opencontainers.image.created: %v", m.Annotations)
	}
}
