package download

import (
	"context"
	"errors"
	"fmt"

	"github.com/sglprov/sglprov/pkg/engine"
	"github.com/sglprov/sglprov/pkg/hub"
)

// Preflight asks the hub whether the pinned revision exists (a commit too, which the
// fingerprint takes on trust). When the hub says it does not (RevisionNotFound), the
// error is marked engine.ErrHost: plan exits 4 rather than promise a download that cannot
// happen. A hub that cannot be reached now is not the recipe's fault: that is a nil error,
// and the step finds out when it runs.
func (s *Step) Preflight(ctx context.Context, env *engine.Env) error {
	if s.spec.HF == nil {
		return nil
	}
	c, err := s.hubClient(env, -1)
	if err != nil {
		return nil
	}
	rev := s.revision()
	_, err = c.ResolveRevision(ctx, s.spec.HF.Repo, rev)
	var api *hub.APIError
	if errors.As(err, &api) && api.Code == "RevisionNotFound" {
		return fmt.Errorf("%w: the hub has no revision %q of %s: %w", engine.ErrHost, rev, s.spec.HF.Repo, err)
	}
	return nil
}
