package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of TandemDeployment.
var GroupVersion = schema.GroupVersion{Group: "tandem.dev", Version: "v1alpha1"}

// AddToScheme registers the types with a scheme. Written out rather than
// taken from controller-runtime's scheme.Builder so that the types package
// needs apimachinery only.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &TandemDeployment{}, &TandemDeploymentList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
