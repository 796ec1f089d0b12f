/**
 * A campaign id as a file and rendezvous name: characters outside [A-Za-z0-9_.-] become '_'. The campaign's run
 * folder, its learner folder and its torchrun rendezvous id all use this one form, so they always agree.
 */
export function campaignFileName(campaignId: string): string {
  return campaignId.replace(/[^A-Za-z0-9_.-]/g, '_');
}
