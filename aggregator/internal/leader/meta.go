package leader

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func metaOf(cfg Config) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name}
}
