/**
 * Errors the control plane's admission, strategy and authorization modules throw (issue 27):
 * a Status in kube-apiserver's shapes. server.ts turns each into its ApiError at the edge, so
 * these modules do not import the server (no import circle).
 */
import type { Obj } from './store.js';

export interface Cause {
  reason: string;
  message: string;
  field: string;
}

export class StatusError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Obj,
  ) {
    super(message);
  }
}

/** `<resource> "<name>" is forbidden: <msg>` (apierrors.NewForbidden; admission.NewForbidden uses the object's name). */
export function forbidden(group: string, resource: string, name: string, msg: string): StatusError {
  const what = name === '' ? `${resource}${group ? `.${group}` : ''}` : `${resource}${group ? `.${group}` : ''} "${name}"`;
  return new StatusError(403, 'Forbidden', `${what} is forbidden: ${msg}`, { name, group, kind: resource });
}

export function notFoundError(group: string, resource: string, name: string): StatusError {
  return new StatusError(404, 'NotFound', `${resource}${group ? `.${group}` : ''} "${name}" not found`, { name, group, kind: resource });
}

export function badRequestError(msg: string): StatusError {
  return new StatusError(400, 'BadRequest', msg);
}

export function conflictError(group: string, resource: string, name: string, msg: string): StatusError {
  return new StatusError(409, 'Conflict', `Operation cannot be fulfilled on ${resource}${group ? `.${group}` : ''} "${name}": ${msg}`, { name, group, kind: resource });
}

/** A field error as field.Error renders it: `<field>: <type>: <detail>`. */
export function cause(reason: 'FieldValueInvalid' | 'FieldValueRequired' | 'FieldValueForbidden' | 'FieldValueTooLong' | 'FieldValueNotSupported' | 'FieldValueDuplicate', field: string, message: string): Cause {
  return { reason, field, message };
}

/** 422 Invalid with every cause (apierrors.NewInvalid). */
export function invalidError(group: string, kind: string, name: string, causes: Cause[]): StatusError {
  return new StatusError(422, 'Invalid', `${kind}${group ? `.${group}` : ''} "${name}" is invalid: ${causes.length === 1 ? `${causes[0]!.field}: ${causes[0]!.message}` : `[${causes.map((c) => `${c.field}: ${c.message}`).join(', ')}]`}`, {
    name,
    group,
    kind,
    causes: causes.map((c) => ({ reason: c.reason, message: c.message, field: c.field })),
  });
}
