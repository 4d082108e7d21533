module github.com/libapf/apf-go/k8scompare

go 1.26.0

require k8s.io/apiserver v0.37.2 // indirect
