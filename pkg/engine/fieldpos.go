package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sglprov/sglprov/pkg/exitcode"
)

// fieldError is an error about one field of a step's body: the engine prefixes it with
// the field's position in the recipe (FILE:LINE:COL).
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

// AtField marks err as being about the step body's field (dotted for nested fields:
// "hf.token_file"; "args[2]" for a list item), so that validate and plan say where it is.
func AtField(field string, err error) error {
	if err == nil {
		return nil
	}
	return &fieldError{field: field, err: err}
}

// stepError prefixes err with the recipe position of the step's field it names (see
// AtField), else of the step, and with the step's name.
func stepError(v *vertex, err error) error {
	pos := v.step.Pos
	var fe *fieldError
	if errors.As(err, &fe) {
		pos = v.step.FieldPos(fe.field)
	}
	if pos.File == "" {
		return fmt.Errorf("step %s: %w", v.step.Name, err)
	}
	return fmt.Errorf("%s: step %s: %w", pos, v.step.Name, err)
}

// Claim is something on the node that only one step of a recipe may have: a service
// unit's name, a TCP port a server listens on.
type Claim struct {
	// What is claimed, e.g. "unit sglang.service" or "port 30000"; Field the body field
	// that names it, for the position.
	What, Field string
}

// Claimer is implemented by steps that claim something on the node that no other step of
// the recipe may claim (a service step's unit and port): two are refused before anything
// runs, at validate, plan and apply alike.
type Claimer interface {
	Claims() []Claim
}

// checkClaims refuses two steps that claim the same thing, naming both places.
func (e *Engine) checkClaims() error {
	type first struct {
		v     *vertex
		field string
	}
	seen := map[string]first{}
	var errs []string
	for _, v := range e.vertices {
		c, ok := v.impl.(Claimer)
		if !ok {
			continue
		}
		for _, cl := range c.Claims() {
			f, dup := seen[cl.What]
			if !dup {
				seen[cl.What] = first{v, cl.Field}
				continue
			}
			errs = append(errs, fmt.Sprintf("%s: step %s: %s is also step %s's (%s): two services of one recipe cannot share it; give each its own",
				v.step.FieldPos(cl.Field), v.step.Name, cl.What, f.v.step.Name, f.v.step.FieldPos(f.field)))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", exitcode.ErrUsage, strings.Join(errs, "\n"))
}
