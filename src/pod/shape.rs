//! The JSON shapes of the Kubernetes fields atoll's types do not read, as kubelet's decoder
//! checks them: a field atoll ignores still has to decode into its Go type (k8s.io/api core/v1),
//! or kubelet refuses the whole Pod.
//!
//! A shape is a short code: `s` string, `b` boolean, `i` 32-bit integer, `I` 64-bit integer,
//! `q` quantity (a string that parses, or a number), `n` integer or string (IntOrString), `t`
//! an RFC 3339 time, `o` any object, `*` anything, `[X]` a list of X, `{X}` an object of X
//! (a Go map), `@name` an object whose fields are the table `name` below (space-separated
//! `field:shape`; a key it does not list is ignored, as Go ignores it). `null` fits every
//! shape, as it decodes into any Go value.

use super::quantity::Quantity;
use serde_json::Value;

/// Go structs by name: `field:shape ...`, only the fields a manifest may get wrong.
static TABLES: &[(&str, &str)] = &[
    ("name", "name:s"),
    ("sel", "matchLabels:{s} matchExpressions:[@req]"),
    ("req", "key:s operator:s values:[s]"),
    ("res", "limits:{q} requests:{q} claims:[@claim]"),
    ("vres", "limits:{q} requests:{q}"),
    ("claim", "name:s request:s"),
    ("meta", "name:s generateName:s namespace:s selfLink:s uid:s resourceVersion:s generation:I creationTimestamp:t deletionTimestamp:t deletionGracePeriodSeconds:I labels:{s} annotations:{s} ownerReferences:[@owner] finalizers:[s] managedFields:[@managed]"),
    ("owner", "apiVersion:s kind:s name:s uid:s controller:b blockOwnerDeletion:b"),
    ("managed", "manager:s operation:s apiVersion:s time:t fieldsType:s subresource:s"),
    ("gate", "conditionType:s"),
    ("group", "podGroupName:s"),
    ("responder", "name:s priority:i"),
    ("spread", "maxSkew:i topologyKey:s whenUnsatisfiable:s labelSelector:@sel minDomains:i nodeAffinityPolicy:s nodeTaintsPolicy:s matchLabelKeys:[s]"),
    ("podclaim", "name:s resourceClaimName:s resourceClaimTemplateName:s"),
    ("windows", "gmsaCredentialSpecName:s gmsaCredentialSpec:s runAsUserName:s hostProcess:b"),
    ("resize", "resourceName:s restartPolicy:s"),
    ("rule", "action:s exitCodes:@codes"),
    ("codes", "operator:s values:[i]"),
    ("device", "name:s devicePath:s"),
    ("filekey", "volumeName:s path:s key:s optional:b"),
    // Refused when set (validation), so only their outline.
    ("ephemeral", "name:s image:s command:[s] args:[s] workingDir:s ports:[o] envFrom:[o] env:[o] resources:@res resizePolicy:[@resize] restartPolicy:s restartPolicyRules:[@rule] volumeMounts:[o] volumeDevices:[@device] livenessProbe:o readinessProbe:o startupProbe:o lifecycle:o terminationMessagePath:s terminationMessagePolicy:s imagePullPolicy:s securityContext:o stdin:b stdinOnce:b tty:b targetContainerName:s"),
    ("pvc", "claimName:s readOnly:b"),
    ("csi", "driver:s readOnly:b fsType:s volumeAttributes:{s} nodePublishSecretRef:@name"),
    ("ephvol", "volumeClaimTemplate:@pvct"),
    ("pvct", "metadata:@meta spec:@pvcspec"),
    ("pvcspec", "accessModes:[s] selector:@sel resources:@vres volumeName:s storageClassName:s volumeMode:s dataSource:@ref dataSourceRef:@ref volumeAttributesClassName:s"),
    ("ref", "apiGroup:s kind:s name:s namespace:s"),
    ("satoken", "audience:s expirationSeconds:I path:s user:I"),
    ("ctb", "name:s signerName:s labelSelector:@sel optional:b path:s user:I"),
    ("podcert", "signerName:s keyType:s maxExpirationSeconds:i credentialBundlePath:s keyPath:s certificateChainPath:s userAnnotations:{s} user:I"),
    ("status", "observedGeneration:I phase:s conditions:[@cond] message:s reason:s nominatedNodeName:s hostIP:s hostIPs:[@ip] podIP:s podIPs:[@ip] startTime:t initContainerStatuses:[@cs] containerStatuses:[@cs] qosClass:s ephemeralContainerStatuses:[@cs] resize:s resourceClaimStatuses:[o] extendedResourceClaimStatus:o allocatedResources:{q} resources:@res nodeAllocatableResourceClaimStatuses:[o] volumeHealth:[o]"),
    ("cond", "type:s observedGeneration:I status:s lastProbeTime:t lastTransitionTime:t reason:s message:s"),
    ("ip", "ip:s"),
    ("cs", "name:s state:@state lastState:@state ready:b restartCount:i image:s imageID:s containerID:s started:b allocatedResources:{q} resources:@res volumeMounts:[o] user:o allocatedResourcesStatus:[o] stopSignal:s"),
    ("state", "waiting:@waiting running:@running terminated:@ended"),
    ("waiting", "reason:s message:s"),
    ("running", "startedAt:t"),
    ("ended", "exitCode:i signal:i reason:s message:s startedAt:t finishedAt:t containerID:s"),
    // Pod affinity and anti-affinity: the scheduler's, decoded and not used.
    ("podaff", "requiredDuringSchedulingIgnoredDuringExecution:[@podterm] preferredDuringSchedulingIgnoredDuringExecution:[@weighted]"),
    ("podterm", "labelSelector:@sel namespaces:[s] topologyKey:s namespaceSelector:@sel matchLabelKeys:[s] mismatchLabelKeys:[s]"),
    ("weighted", "weight:i podAffinityTerm:@podterm"),
];

/// The shape of `field` in a space-separated `field:shape` list (`""` when it has none).
pub fn field_shape(list: &'static str, field: &str) -> Option<&'static str> {
    list.split(' ').find_map(|e| {
        let (name, shape) = e.split_once(':').unwrap_or((e, ""));
        (name == field && !field.is_empty()).then_some(shape)
    })
}

/// Whether `v` (at field path `path`) has the shape `code`; else the path of the first value
/// that does not, and why.
pub fn check(code: &str, v: &Value, path: &str) -> Result<(), (String, String)> {
    let inner = |open: char, close: char| code.strip_prefix(open).and_then(|c| c.strip_suffix(close));
    let expected = match (code.as_bytes().first().copied().unwrap_or(b'*'), v) {
        (_, Value::Null)
        | (b'*', _)
        | (b's', Value::String(_))
        | (b'b', Value::Bool(_))
        | (b'o', Value::Object(_))
        | (b'q', Value::Number(_))
        | (b'n', Value::String(_)) => return Ok(()),
        (b'i' | b'n', Value::Number(n)) if n.as_i64().is_some_and(|n| i32::try_from(n).is_ok()) => return Ok(()),
        (b'I', Value::Number(n)) if n.is_i64() => return Ok(()),
        (b't', Value::String(s)) if !s.contains(['t', 'z']) && crate::rfc3339::parse_nanos(s).is_some() => {
            return Ok(())
        }
        (b'q', Value::String(s)) => return Quantity::parse(s).map(drop).map_err(|e| (path.to_string(), e.into())),
        (b'[', Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                check(inner('[', ']').unwrap_or("*"), item, &format!("{path}[{i}]"))?;
            }
            return Ok(());
        }
        (b'{' | b'@', Value::Object(map)) => {
            let table = code.strip_prefix('@').and_then(|t| TABLES.iter().find(|(n, _)| *n == t)).map(|(_, l)| *l);
            for (key, item) in map {
                let shape = match table {
                    Some(list) => field_shape(list, key),
                    None => inner('{', '}'),
                };
                check(shape.unwrap_or("*"), item, &format!("{path}.{key}"))?;
            }
            return Ok(());
        }
        (b's', _) => "a string",
        (b'b', _) => "true or false",
        (b'i', _) => "a 32-bit integer",
        (b'I', _) => "an integer",
        (b'q', _) => "a quantity (a string or a number)",
        (b'n', _) => "an integer or a string",
        (b't', _) => "an RFC 3339 time such as 2024-05-01T12:00:00Z",
        (b'[', _) => "a list",
        _ => "an object",
    };
    Err((path.to_string(), format!("expected {expected}, found {}", kind_of(v))))
}

/// What a JSON value is, for a message (a number as written).
pub fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(n) => return n.to_string(),
        Value::String(s) if s.len() <= 40 => return format!("{s:?}"),
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
    .to_string()
}

#[cfg(test)]
mod tests;
