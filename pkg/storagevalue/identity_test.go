package storagevalue

import (
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

func identityOf() value.Transformer { return identity.NewEncryptCheckTransformer() }
