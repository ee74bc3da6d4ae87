//! Datasets: directories, NFS exports and S3 buckets round-trip on both backends, with their read-only
//! flag and the sealed secret key exactly as given (the store never sees a plain one); re-registering
//! replaces every column.

use gpuhub_core::dataset::{Dataset, S3Source, Secret};
use gpuhub_store::{Store, StoreError};

both!(datasets);

fn dir(name: &str) -> Dataset {
    Dataset {
        name: name.into(),
        path: "/srv/data".into(),
        nfs: None,
        s3: None,
        read_only: true,
        description: "a corpus".into(),
        status: None,
    }
}

async fn datasets(s: Store) {
    let bucket = Dataset {
        path: String::new(),
        s3: Some(S3Source {
            url: "s3://corpora/text".into(),
            endpoint: "http://10.0.0.5:9000".into(),
            region: Some("eu-west-1".into()),
            access_key: Some("AKID".into()),
            secret_key: Some(Secret::new("v1:c2VhbGVk")),
        }),
        read_only: false,
        ..dir("bucket")
    };
    s.upsert_dataset(&dir("plain")).await.unwrap();
    s.upsert_dataset(&bucket).await.unwrap();
    let got = s.get_dataset("bucket").await.unwrap();
    assert_eq!(got, bucket);
    assert_eq!(got.s3.as_ref().unwrap().secret_key.as_ref().unwrap().expose(), "v1:c2VhbGVk");
    assert_eq!(s.list_datasets().await.unwrap(), vec![bucket.clone(), dir("plain")]);
    // anonymous, read-only again: every column replaced
    let anonymous = Dataset {
        s3: Some(S3Source { access_key: None, secret_key: None, region: None, ..bucket.s3.clone().unwrap() }),
        read_only: true,
        ..bucket.clone()
    };
    s.upsert_dataset(&anonymous).await.unwrap();
    assert_eq!(s.get_dataset("bucket").await.unwrap(), anonymous);
    // a directory again: no S3 columns left
    s.upsert_dataset(&dir("bucket")).await.unwrap();
    assert_eq!(s.get_dataset("bucket").await.unwrap(), dir("bucket"));
    s.delete_dataset("bucket").await.unwrap();
    assert!(matches!(s.get_dataset("bucket").await.unwrap_err(), StoreError::NotFound { .. }));
}
