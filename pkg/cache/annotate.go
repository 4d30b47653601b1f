package cache

import (
	"context"
	"maps"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Annotation keys sglprov sets on an artifact's manifest, beside
// org.opencontainers.image.created, so that a registry's UI shows what a tag is.
const (
	// AnnotationRecipe is the name of the recipe whose step made the artifact.
	AnnotationRecipe = "org.sglprov.recipe"
	// AnnotationStep is the step's name in the recipe.
	AnnotationStep = "org.sglprov.step"
	// AnnotationModel is the hub repository of a download's weights.
	AnnotationModel = "org.sglprov.model"
	// AnnotationRevision is the revision the recipe asks for (a branch, tag or commit).
	AnnotationRevision = "org.sglprov.revision"
	// AnnotationModelCommit is the hub commit that revision resolved to.
	AnnotationModelCommit = "org.sglprov.model.commit"
	// AnnotationSGLangCommit is the SGLang commit the recipe's source step checked out.
	AnnotationSGLangCommit = "org.sglprov.sglang.commit"
)

type annotationsKey struct{}

// WithAnnotations returns ctx carrying kv (empty values are dropped) on top of the
// annotations ctx already carries: Push puts them on the manifest it writes. The engine
// adds what it knows of the run (recipe, step, SGLang commit), a step what it knows of its
// files (a download's model and revision).
func WithAnnotations(ctx context.Context, kv map[string]string) context.Context {
	m := maps.Clone(annotationsFrom(ctx))
	if m == nil {
		m = map[string]string{}
	}
	for k, v := range kv {
		if v != "" {
			m[k] = v
		}
	}
	return context.WithValue(ctx, annotationsKey{}, m)
}

// annotationsFrom is what WithAnnotations put on ctx (nil when nothing).
func annotationsFrom(ctx context.Context) map[string]string {
	m, _ := ctx.Value(annotationsKey{}).(map[string]string)
	return m
}

// manifestAnnotations is the manifest's annotations: when it was made (RFC 3339, UTC, as
// the image spec says) and what ctx carries.
func manifestAnnotations(ctx context.Context, now time.Time) map[string]string {
	m := maps.Clone(annotationsFrom(ctx))
	if m == nil {
		m = map[string]string{}
	}
	m[ocispec.AnnotationCreated] = now.UTC().Format(time.RFC3339)
	return m
}
