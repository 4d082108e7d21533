module github.com/libapf/apf/bindings/go

go 1.24
