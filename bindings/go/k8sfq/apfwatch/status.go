package apfwatch

import (
	"context"
	"errors"
	"fmt"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fcapply "k8s.io/client-go/applyconfigurations/flowcontrol/v1"
)

// danglingCondition is the schema's Dangling condition, nil if it has none.
func danglingCondition(s *flowcontrol.FlowSchema) *flowcontrol.FlowSchemaCondition {
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == flowcontrol.FlowSchemaConditionDangling {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// wantDangling is the Dangling condition a schema should carry, with
// Kubernetes' status, reason and message: True/NotFound when no priority
// level object has the name it references, False/Found otherwise.
func wantDangling(s *flowcontrol.FlowSchema, levelNames map[string]bool) (flowcontrol.ConditionStatus, string, string) {
	pl := s.Spec.PriorityLevelConfiguration.Name
	if levelNames[pl] {
		return flowcontrol.ConditionFalse, "Found",
			fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", pl)
	}
	return flowcontrol.ConditionTrue, "NotFound",
		fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q but there is no such object", pl)
}

// writeStatus server-side applies the Dangling condition of each schema
// whose condition differs from the wanted one (status, reason or
// message; the transition time is then now), as Kubernetes' controller
// does. A schema deleted meanwhile is skipped: its deletion is on its way.
func (w *Watcher) writeStatus(ctx context.Context, schemas []*flowcontrol.FlowSchema,
	levels []*flowcontrol.PriorityLevelConfiguration) (int, error) {
	levelNames := make(map[string]bool, len(levels))
	for _, l := range levels {
		levelNames[l.Name] = true
	}
	client := w.opts.StatusClient.FlowSchemas()
	var errs []error
	writes := 0
	for _, s := range schemas {
		status, reason, message := wantDangling(s, levelNames)
		if c := danglingCondition(s); c != nil && c.Status == status && c.Reason == reason && c.Message == message {
			continue
		}
		cond := fcapply.FlowSchemaCondition().
			WithType(flowcontrol.FlowSchemaConditionDangling).
			WithStatus(status).
			WithReason(reason).
			WithMessage(message).
			WithLastTransitionTime(metav1.NewTime(w.opts.Clock.Now()))
		patch := fcapply.FlowSchema(s.Name).WithStatus(fcapply.FlowSchemaStatus().WithConditions(cond))
		_, err := client.ApplyStatus(ctx, patch, metav1.ApplyOptions{FieldManager: w.opts.FieldManager, Force: true})
		switch {
		case err == nil:
			writes++
		case apierrors.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("FlowSchema %q: writing its Dangling condition: %w", s.Name, err))
		}
	}
	return writes, errors.Join(errs...)
}
