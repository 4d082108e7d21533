package apfwatch

import (
	"encoding/json"
	"fmt"
	"sort"

	flowcontrol "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

var everything = labels.Everything()

// item is an object as libapf's configuration reads it: kind, name, uid,
// annotations (the zero-shares annotation) and spec. Status and the rest
// of the metadata are left out, so that a status write or a new
// resourceVersion alone gives the same configuration text.
type item struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   itemMeta `json:"metadata"`
	Spec       any      `json:"spec"`
}

type itemMeta struct {
	Name        string            `json:"name"`
	UID         types.UID         `json:"uid,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func schemaItem(s *flowcontrol.FlowSchema) item {
	return item{
		APIVersion: flowcontrol.SchemeGroupVersion.String(), Kind: "FlowSchema",
		Metadata: itemMeta{Name: s.Name, UID: s.UID, Annotations: s.Annotations},
		Spec:     &s.Spec,
	}
}

func levelItem(l *flowcontrol.PriorityLevelConfiguration) item {
	return item{
		APIVersion: flowcontrol.SchemeGroupVersion.String(), Kind: "PriorityLevelConfiguration",
		Metadata: itemMeta{Name: l.Name, UID: l.UID, Annotations: l.Annotations},
		Spec:     &l.Spec,
	}
}

func encodeItem(it item) (string, error) {
	b, err := json.Marshal(it)
	return string(b), err
}

// configText is the objects as a kubectl-style JSON List, levels then
// schemas, each in name order, so that equal object sets give equal text.
func configText(schemas []*flowcontrol.FlowSchema, levels []*flowcontrol.PriorityLevelConfiguration) ([]byte, error) {
	schemas = append([]*flowcontrol.FlowSchema(nil), schemas...)
	levels = append([]*flowcontrol.PriorityLevelConfiguration(nil), levels...)
	sort.Slice(schemas, func(i, j int) bool { return schemas[i].Name < schemas[j].Name })
	sort.Slice(levels, func(i, j int) bool { return levels[i].Name < levels[j].Name })
	items := make([]item, 0, len(schemas)+len(levels))
	for _, l := range levels {
		items = append(items, levelItem(l))
	}
	for _, s := range schemas {
		items = append(items, schemaItem(s))
	}
	text, err := json.Marshal(struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Items      []item `json:"items"`
	}{"v1", "List", items})
	if err != nil {
		return nil, fmt.Errorf("apfwatch: encoding the objects: %w", err)
	}
	return text, nil
}
